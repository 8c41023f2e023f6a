"""Both sinks' fixtures for the parity suite: the shared session with the JVM sink's jars, and Postgres."""

from tests.jvm_sink.conftest import jvm_spark, require_password_auth, sink_jars  # noqa: F401  (fixtures)
