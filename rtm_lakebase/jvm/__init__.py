"""The JVM sink: a compiled Java ``ForeachWriter`` (``PostgresForeachWriter.java``, in this folder) driven from Python.

:func:`start_jvm_sink_query` attaches it to a streaming query; :func:`jvm_sink_jars`
lists the jars the session needs on ``spark.jars``. See :mod:`rtm_lakebase.jvm.sink`.
``python -m rtm_lakebase.jvm build`` compiles the jars (:mod:`rtm_lakebase.jvm.build`).
The names load on first use, so the build command runs without the sink's dependencies (psycopg).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rtm_lakebase.jvm.sink import (
        JvmSinkUnavailable,
        build_jvm_writer,
        jdbc_url,
        jvm_sink_jars,
        start_jvm_sink_query,
    )

__all__ = ["JvmSinkUnavailable", "build_jvm_writer", "jdbc_url", "jvm_sink_jars", "start_jvm_sink_query"]


def __getattr__(name: str):
    if name in __all__:
        from rtm_lakebase.jvm import sink

        return getattr(sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
