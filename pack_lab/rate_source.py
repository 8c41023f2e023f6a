"""The lab's deterministic real-time rate source (``pack_lab/jvm/RateSource.java``), driven from Python.

Row ``i`` has ``id = i`` and ``sent_ms = start_ms + floor(i * 1000 / rows_per_second)`` and is
emitted no earlier than ``sent_ms``; the source computes rows from their ids, so it holds none, keeps
its pace however long it runs, and a restart from a checkpoint replays the same rows. It works in
real-time mode and in micro-batch, locally and on a standalone cluster (its jar on ``spark.jars``)::

    spark = build_session(jars=rate_source_jars() + jvm_sink_jars())
    df = rate_stream(spark, rows_per_second=1000, total_rows=60_000, start_ms=int(time.time() * 1000))

It replaces ``RealTimeMemorySource`` (Spark's test class ``LowLatencyMemoryStream``, which keeps
every row it was given and slows as it holds more) where the rows can be numbered in advance.
The jar is built by ``scripts/build_jvm_sink.sh`` (part of ``scripts/setup.sh``), with the same
content stamp as the JVM sink's: :func:`rate_source_jars` refuses a jar older than its source.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession

#: The Java class (the ``format`` name), compiled from ``pack_lab/jvm/RateSource.java``.
SOURCE_CLASS = "pack_lab.jvm.RateSource"
JVM_DIR = Path(__file__).resolve().parent / "jvm"
DEFAULT_JAR = JVM_DIR / "build" / "rtm-lab-rate-source.jar"
JAR_ENV = "RTM_LAB_RATE_SOURCE_JAR"
BUILD_HINT = ("run `bash scripts/build_jvm_sink.sh` in the pack's repository (needs a JDK with javac), "
              f"or compile pack_lab/jvm/*.java against pyspark's jars into a jar and set {JAR_ENV} to it")


class RateSourceUnavailable(RuntimeError):
    """The rate source's jar is missing or stale; the message says how to build it."""


def _sources_sha() -> str:
    """The hash ``scripts/build_jvm_sink.sh`` records: the folder's ``.java`` files in name order."""
    digest = hashlib.sha256()
    for path in sorted(JVM_DIR.glob("*.java"), key=lambda p: p.name.encode()):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def rate_source_jars() -> list[str]:
    """The jar a session needs on ``spark.jars`` (driver and executors) for :func:`rate_stream`."""
    override = os.environ.get(JAR_ENV)
    jar = Path(override) if override else DEFAULT_JAR
    if not jar.is_file():
        where = f"${JAR_ENV}={override}" if override else str(jar)
        raise RateSourceUnavailable(f"the lab's rate source jar is not built ({where} not found): {BUILD_HINT}")
    if not override:
        stamp = jar.with_suffix(".sha256")
        recorded = stamp.read_text().strip() if stamp.is_file() else None
        if recorded != _sources_sha():
            raise RateSourceUnavailable(f"the lab's rate source jar {jar} is older than pack_lab/jvm/*.java: "
                                        f"{BUILD_HINT}")
    return [str(jar)]


def rate_stream(spark: SparkSession, rows_per_second: int, total_rows: int, start_ms: int,
                payload: str | None = None, num_partitions: int = 1) -> DataFrame:
    """A streaming DataFrame ``id BIGINT, sent_ms BIGINT, payload STRING`` from the rate source.

    Raises :class:`RateSourceUnavailable` when the class is not on the session's classpath, and
    ``IllegalArgumentException`` (from Spark) naming the option when an option is bad.
    """
    from py4j.java_gateway import JavaClass

    jvm = spark.sparkContext._jvm
    if not isinstance(jvm.pack_lab.jvm.RateSource, JavaClass):
        raise RateSourceUnavailable(f"class {SOURCE_CLASS} is not on the session's classpath: start the "
                                    f"session with spark.jars including rate_source_jars() ({BUILD_HINT})")
    reader = (spark.readStream.format(SOURCE_CLASS).option("rowsPerSecond", str(rows_per_second))
              .option("totalRows", str(total_rows)).option("startMs", str(start_ms))
              .option("numPartitions", str(num_partitions)))
    if payload is not None:
        reader = reader.option("payload", payload)
    return reader.load()
