"""Drive either sink through the foreach contract (open, process, close) and report what it did, alike.

The Python writer runs in this process; the JVM writer is the Java object Spark
would call, driven through py4j with rows Spark built (one small Spark job).
Flushes happen only in ``close(None)`` (no timer, one batch), so the outcome
does not depend on timing. What is reported is the sink's observable contract:
written or not, retried or not, and for a failure the SQLSTATE and, for a bad
row, the key and column, plus the message (to check that no secret is in it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import LongType, StringType, StructField, StructType

from rtm_lakebase.jvm.sink import build_jvm_writer
from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkError, SinkSettings

SCHEMA = StructType([StructField("id", LongType()), StructField("version", LongType()),
                     StructField("name", StringType())])
#: Knobs both engines get: small bounded retries, no timer flush (the JVM sink needs a dwell ≥ 1 ms).
COMMON = {"max_batch_rows": 1000, "max_retries": 2, "backoff_initial_ms": 10, "backoff_max_ms": 50}


@dataclass
class Observed:
    outcome: str                 # "written" | "bad_row" | "failed"
    retried: bool
    sqlstate: str | None = None
    key: dict[str, Any] | None = None
    column: str | None = None
    message: str = ""


def run_python(spark, dsn, table: str, rows: list[dict], between: Callable[[], None] | None = None,
               **options) -> Observed:
    w = PostgresForeachWriter(dsn, SinkSettings(table=table, max_dwell_ms=0, **{**COMMON, **options}))

    def retried() -> bool:
        return bool(w.metrics.retries or w.metrics.conflict_retries)

    opened = False
    try:
        w.open(0, 0)
        opened = True
        for row in rows:
            w.process(row)
        if between is not None:
            between()
        w.close(None)
    except BadRowError as exc:
        return Observed("bad_row", retried(), exc.sqlstate, exc.key, exc.column, str(exc))
    except SinkError as exc:
        if opened:
            w.close(exc)
        return Observed("failed", retried(), exc.sqlstate, None, None, str(exc))
    return Observed("written", retried())


def run_jvm(spark, dsn, table: str, rows: list[dict], between: Callable[[], None] | None = None,
            **options) -> Observed:
    from py4j.protocol import Py4JJavaError

    writer = build_jvm_writer(spark, dsn=dsn, table=table, max_dwell_ms=600_000, **{**COMMON, **options})
    java_rows = spark.createDataFrame([(r["id"], r["version"], r["name"]) for r in rows], SCHEMA)._jdf \
        .collectAsList()

    def retried() -> bool:
        found = re.search(r"\bretries=(\d+)", writer.metrics())
        return bool(found and int(found.group(1)))

    try:
        writer.open(0, 0)
        try:
            for row in java_rows:
                writer.process(row)
            if between is not None:
                between()
        except Py4JJavaError as exc:
            writer.close(exc.java_exception)
            raise
        writer.close(None)
    except Py4JJavaError as exc:
        java = exc.java_exception
        message = str(java.getMessage())
        sqlstate = _call(java, "getSQLState")
        if java.getClass().getSimpleName() == "BadRowException":
            key = java.getKey()
            found = {str(k): key.get(k) for k in key.keySet()} if key is not None else None
            return Observed("bad_row", retried(), sqlstate, found, _call(java, "getColumn"), message)
        return Observed("failed", retried(), sqlstate, None, None, message)
    return Observed("written", retried())


def _call(java, name: str) -> Any:
    try:
        return getattr(java, name)()
    except Exception:  # the exception class has no such getter
        return None


ENGINES = {"python": run_python, "jvm": run_jvm}
