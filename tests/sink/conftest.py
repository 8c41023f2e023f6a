"""The JVM sink's fixtures, for the tests here that drive both sinks (type matrix, names, text)."""

from tests.jvm_sink.conftest import jvm_spark, sink_jars  # noqa: F401  (fixtures: skip only without javac)
