"""The JVM sink: a compiled Java ``ForeachWriter`` (``PostgresForeachWriter.java``, in this folder) driven from Python.

:func:`start_jvm_sink_query` attaches it to a streaming query; :func:`jvm_sink_jars`
lists the jars the session needs on ``spark.jars``. See :mod:`rtm_lakebase.jvm.sink`.
"""

from rtm_lakebase.jvm.sink import JvmSinkUnavailable, build_jvm_writer, jdbc_url, jvm_sink_jars, start_jvm_sink_query

__all__ = ["JvmSinkUnavailable", "build_jvm_writer", "jdbc_url", "jvm_sink_jars", "start_jvm_sink_query"]
