"""Local real-time-mode lab: a SparkSession fit for RTM and an in-memory real-time source.

Open-source Spark 4.3 runs real-time mode (RTM) in local mode, but its only
RTM-capable source inside the pyspark wheel is the test class
``LowLatencyMemoryStream``. This module wraps it behind a small Python API so
tests, benchmarks and the demo can run real RTM queries without Kafka::

    spark = build_session(cores=4)
    source = RealTimeMemorySource(spark, "id INT, name STRING", num_partitions=1)
    query = (source.dataframe().writeStream.format("console")
             .outputMode("update").trigger(realTime="5 seconds").start())
    source.add([{"id": 1, "name": "a"}])

Nothing here falls back to micro-batch: if the running Spark cannot do RTM the
functions raise :class:`RealTimeModeUnavailable` naming the version found.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: First open-source release with the Python ``realTime=`` keyword and
#: stateful RTM operators (dedup, aggregation).
MIN_SPARK_VERSION = (4, 3)

#: Smallest real-time trigger duration open-source Spark accepts.
MIN_REAL_TIME_TRIGGER = "5 seconds"

_SOURCE_CLASS = "org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream$"


class RealTimeModeUnavailable(RuntimeError):
    """The running Spark cannot run a local real-time-mode query."""


@dataclass(frozen=True)
class LabConfig:
    """Settings for a local RTM session.

    ``cores`` must cover every task of every stage at once: RTM schedules all
    stages of a long batch concurrently, so a stateful query needs
    ``source partitions + shuffle partitions`` task slots.
    """

    cores: int = 4
    shuffle_partitions: int = 2
    app_name: str = "rtm-lab"
    driver_memory: str = "2g"
    ui: bool = False
    extra_conf: Mapping[str, str] | None = None
    #: Jars on the session's classpath from the start (``spark.jars``), e.g. ``jvm_sink_jars()``.
    jars: Sequence[str] | None = None


def spark_version_tuple(version: str) -> tuple[int, int]:
    """``"4.3.0"`` → ``(4, 3)``; anything unparsable → ``(0, 0)``."""
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def check_spark_version(version: str | None = None) -> str:
    """Raise :class:`RealTimeModeUnavailable` unless pyspark is new enough; return the version."""
    if version is None:
        try:
            import pyspark
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RealTimeModeUnavailable(
                "pyspark is not installed; install pyspark==4.3.0 (pip install 'pyspark==4.3.0')"
            ) from exc
        version = pyspark.__version__
    if spark_version_tuple(version) < MIN_SPARK_VERSION:
        need = ".".join(map(str, MIN_SPARK_VERSION))
        raise RealTimeModeUnavailable(
            f"pyspark {version} found; the local RTM lab needs pyspark {need} or later "
            "(the Python realTime= trigger keyword and stateful RTM operators arrived in 4.3)"
        )
    return version


def session_conf(config: LabConfig) -> dict[str, str]:
    """The Spark settings the lab uses, as a plain dict (tested, and shown in the docs)."""
    conf = {
        "spark.master": f"local[{config.cores}]",
        "spark.app.name": config.app_name,
        "spark.driver.memory": config.driver_memory,
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        # RTM stateful operators need the RocksDB state store's changelog
        # checkpointing; it is also the production default on Databricks.
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.ui.enabled": "true" if config.ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "false",
        # Workers must run this interpreter (the venv's), not the system one.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    if config.jars:
        conf["spark.jars"] = ",".join(str(j) for j in config.jars)
    conf.update(dict(config.extra_conf or {}))
    return conf


def build_session(cores: int = 4, shuffle_partitions: int = 2, jars: Sequence[str] | None = None,
                  jvm_log: str | None = None, **kwargs: Any) -> SparkSession:
    """Start (or return the running) local SparkSession set up for RTM.

    ``jars`` go on ``spark.jars`` (e.g. ``rtm_lakebase.jvm.sink.jvm_sink_jars()``); they only
    take effect when this call starts the session, not on one already running.
    ``jvm_log``: a file that receives the JVM's standard error (Spark's log and what the Python
    workers print) instead of the terminal; used by command-line tools that keep their output
    to their own lines. Only applies when this call starts the JVM.
    """
    check_spark_version()
    config = LabConfig(cores=cores, shuffle_partitions=shuffle_partitions, jars=jars, **kwargs)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    conf = session_conf(config)
    if jvm_log is not None:
        _launch_jvm(conf, jvm_log)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _launch_jvm(conf: Mapping[str, str], log_path: str) -> None:
    """Start the py4j gateway (the JVM) with its standard error appended to ``log_path``."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a JVM is already running: nothing to redirect
        return
    spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": log})
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)


def local_cores(spark: SparkSession) -> int:
    """Task slots of a ``local[N]`` session (``defaultParallelism``)."""
    return int(spark.sparkContext.defaultParallelism)


def _as_schema(schema: StructType | str) -> StructType:
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        return StructType.fromDDL(schema)
    raise TypeError(f"schema must be a StructType or a DDL string, not {type(schema).__name__}")


class RealTimeMemorySource:
    """An in-memory streaming source that real-time mode accepts.

    Rows are Python dicts (or tuples in schema order). They travel as JSON
    strings through ``LowLatencyMemoryStream`` and are parsed back with
    ``from_json`` inside the query, so the resulting DataFrame has ``schema``.
    A whole ``add()`` call is one py4j round trip.

    The source moves roughly 10k rows/s and slows as it holds more rows: feed
    it in small chunks over time, not one large batch.
    """

    def __init__(self, spark: SparkSession, schema: StructType | str, num_partitions: int = 1):
        check_spark_version(spark.version)
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        self.spark = spark
        self.schema = _as_schema(schema)
        self.num_partitions = num_partitions
        jvm = spark.sparkContext._jvm
        try:
            factory = getattr(getattr(jvm, _SOURCE_CLASS), "MODULE$")
        except Exception as exc:  # py4j raises a generic error for a missing class
            raise RealTimeModeUnavailable(
                f"Spark {spark.version} has no LowLatencyMemoryStream; the local RTM lab needs 4.3+"
            ) from exc
        encoder = jvm.org.apache.spark.sql.Encoders.STRING()
        self._stream = factory.apply(spark._jsparkSession, num_partitions, encoder)
        self._jvm = jvm
        self._names = [field.name for field in self.schema.fields]
        self.rows_added = 0

    def _encode(self, row: Mapping[str, Any] | Sequence[Any]) -> str:
        if isinstance(row, Mapping):
            unknown = set(row) - set(self._names)
            if unknown:
                raise ValueError(f"row has columns not in the schema: {sorted(unknown)}")
            record = dict(row)
        else:
            if len(row) != len(self._names):
                raise ValueError(
                    f"row has {len(row)} values, the schema has {len(self._names)} columns"
                )
            record = dict(zip(self._names, row, strict=True))
        text = json.dumps(record, separators=(",", ":"), default=str)
        if "\n" in text:  # json.dumps escapes newlines inside strings; guard anyway
            raise ValueError("encoded row contains a newline")
        return text

    def add(self, rows: Iterable[Mapping[str, Any] | Sequence[Any]], partition: int | None = None) -> int:
        """Append rows (round-robin over partitions, or to one ``partition``); return how many."""
        lines = [self._encode(row) for row in rows]
        if not lines:
            return 0
        if partition is not None and not 0 <= partition < self.num_partitions:
            raise ValueError(f"partition must be in [0, {self.num_partitions}), got {partition}")
        jvm = self._jvm
        # One py4j call: split a newline-joined string JVM-side and wrap it as a Scala Seq.
        array = jvm.org.apache.commons.lang3.StringUtils.split("\n".join(lines), "\n")
        seq = jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(array)
        if partition is None:
            self._stream.addData(seq)
        else:
            self._stream.addData(partition, seq)
        self.rows_added += len(lines)
        return len(lines)

    def raw_dataframe(self) -> DataFrame:
        """The stream as one string column ``value`` holding each row's JSON."""
        from pyspark.sql import DataFrame

        return DataFrame(self._stream.toDF(), self.spark)

    def dataframe(self) -> DataFrame:
        """The stream parsed into ``schema``'s columns."""
        from pyspark.sql import functions as F

        parsed = F.from_json(F.col("value"), self.schema)
        return self.raw_dataframe().select(parsed.alias("r")).select("r.*")
