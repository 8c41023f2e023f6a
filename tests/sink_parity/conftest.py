"""Both sinks' fixtures for the parity suite: the shared session with the JVM sink's and the fast path's jars."""

from tests.foreach.conftest import fast_jars, fast_spark  # noqa: F401  (fixtures)
from tests.jvm_sink.conftest import jvm_spark, require_password_auth, sink_jars  # noqa: F401  (fixtures)
