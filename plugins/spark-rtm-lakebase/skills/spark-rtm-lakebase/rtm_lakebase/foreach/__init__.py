"""A Python ``foreach`` writer at milliseconds on open-source Spark: ``start_foreach_query``.

PySpark's ``foreach`` hands rows to the Python worker in batches that double
until they pass 1 MB and wait until full, so under real-time mode ``process()``
sees a row seconds after Spark had it. ``start_foreach_query`` runs the same
writer object through a JVM writer (``LowLatencyPythonForeachWriter.java`` beside
this file) that sends whatever rows are there as soon as the worker could take
them: one row at a time on a slow stream, bigger batches on a fast one::

    query = start_foreach_query(
        events, PostgresForeachWriter(dsn, SinkSettings(table="events")),
        checkpoint_location="/tmp/ck/events", trigger={"realTime": "5 minutes"})

The writer is unchanged: an object with ``open(partition_id, epoch_id)`` /
``process(row)`` / ``close(error)``, or a function of one row, built into the
Python function exactly as ``DataStreamWriter.foreach`` builds it, and run by
the same Python worker protocol. The session needs the writer's jar on its
classpath from the start (``spark.jars``; :func:`foreach_jars` gives it).

One thing differs from stock ``foreach`` on purpose: an error the Python worker
reports while no row is coming (``PostgresForeachWriter`` raises a flush that
failed for good at once) fails the task within seconds, where stock ``foreach``
reads it only when the long real-time batch ends.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtm_lakebase.sink.deprecated_names import take_old_names

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

#: The Java class, compiled from ``LowLatencyPythonForeachWriter.java`` by the set-up.
WRITER_CLASS = "rtm_lakebase.foreach.LowLatencyPythonForeachWriter"
HERE = Path(__file__).resolve().parent
SOURCE_FILE = HERE / "LowLatencyPythonForeachWriter.java"
#: Where ``python -m rtm_lakebase.jvm build`` puts the jar (git-ignored); ``RTM_FOREACH_JAR`` overrides it.
DEFAULT_JAR = HERE / "build" / "rtm-lakebase-foreach.jar"
JAR_ENV = "RTM_FOREACH_JAR"
#: Open-source Spark releases this writer is proven on: per release line, the newest patch release its tests run
#: (tests/foreach/test_fast_foreach_versions.py: 4.1.4 and 4.2.1; the main suite: 4.3.0). It reflects into
#: PySpark's private foreach internals, so a later patch, another line or a vendor's fork is refused.
PROVEN_RELEASES = ((4, 1, 4), (4, 2, 1), (4, 3, 0))
#: Where a Databricks runtime shows itself: the environment variable its clusters set, and a cluster tag.
DATABRICKS_ENV = "DATABRICKS_RUNTIME_VERSION"
DATABRICKS_CONF = "spark.databricks.clusterUsageTags.sparkVersion"
ALTERNATIVES = ("use the JVM sink (rtm_lakebase.jvm.start_jvm_sink_query) or stock "
                "df.writeStream.foreach(writer) there")
BUILD_HINT = ("run `python -m rtm_lakebase.jvm build` (needs a JDK with javac and pyspark installed; "
              f"in the pack's repository `bash scripts/build_jvm_sink.sh` does it), or set {JAR_ENV} to a built jar")


#: Old names of the batch caps (they meant something else than SinkSettings.max_batch_rows): still taken, with a warning.
OLD_NAMES = {"max_batch_rows": ("worker_batch_rows", None), "max_batch_bytes": ("worker_batch_bytes", None)}
_DEFAULTS = {"worker_batch_rows": 4096, "worker_batch_bytes": 1 << 20}


class FastForeachUnavailable(RuntimeError):
    """The fast foreach path cannot run here; the message names what is missing and how to get it."""


# --8<-- [start:foreach_jars]
def foreach_jars() -> list[str]:
    """The jar a session needs on ``spark.jars`` for :func:`start_foreach_query`.

    Raises :class:`FastForeachUnavailable` when the jar is missing or older than its source.
    """
    override = os.environ.get(JAR_ENV)
    jar = Path(override) if override else DEFAULT_JAR
    if not jar.is_file():
        where = f"${JAR_ENV}={override}" if override else str(jar)
        raise FastForeachUnavailable(f"the fast foreach jar is not built ({where} not found): {BUILD_HINT}")
    if not override:  # the build records the source's hash next to the jar
        stamp = jar.with_suffix(".sha256")
        recorded = stamp.read_text().strip() if stamp.is_file() else None
        sources = sorted(SOURCE_FILE.parent.glob("*.java"))  # hashed as the build does: concatenated by name
        if sources and recorded != hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest():
            raise FastForeachUnavailable(f"the fast foreach jar {jar} is older than {SOURCE_FILE.name}: "
                                         f"{BUILD_HINT}")
    return [str(jar)]
# --8<-- [end:foreach_jars]


def _release(version: str) -> tuple[int, int, int] | None:
    parts = version.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None  # a pre-release, a snapshot or a vendor's suffix
    return int(parts[0]), int(parts[1]), int(parts[2])


def proven_releases_text() -> str:
    """``4.1.0-4.1.4, 4.2.0-4.2.1, 4.3.0``: the releases :func:`check_version` accepts."""
    return ", ".join(f"{a}.{b}.0" if c == 0 else f"{a}.{b}.0-{a}.{b}.{c}" for a, b, c in PROVEN_RELEASES)


def check_version(version: str) -> None:
    """Raise :class:`FastForeachUnavailable` unless ``version`` is an open-source release this writer is proven on."""
    release = _release(version)
    if release is None or not any(release[:2] == proven[:2] and release[2] <= proven[2]
                                  for proven in PROVEN_RELEASES):
        raise FastForeachUnavailable(
            f"Spark {version} is not supported by the fast foreach path, which is proven only on open-source "
            f"Apache Spark {proven_releases_text()} (it reflects into PySpark's private foreach internals): "
            + ALTERNATIVES)


def databricks_runtime(spark: Any = None) -> str | None:
    """The Databricks runtime version this process runs on, or None on open-source Spark."""
    found = os.environ.get(DATABRICKS_ENV, "").strip()
    if found:
        return found
    if spark is not None:
        try:
            tag = spark.conf.get(DATABRICKS_CONF, None)
        except Exception:  # a session without that key or a closed one: no sign of Databricks
            tag = None
        if tag:
            return str(tag)
    return None


def check_runtime(spark: Any) -> None:
    """Refuse, in one line naming the alternatives, any Spark but the open-source releases this path is proven on."""
    runtime = databricks_runtime(spark)
    if runtime is not None:
        raise FastForeachUnavailable(
            f"the fast foreach path does not run on Databricks Runtime ({runtime}, Spark {spark.version}): "
            "its Spark is a fork whose private foreach internals this writer was never tested against; "
            + ALTERNATIVES)
    check_version(spark.version)


def _classic_handles(df: DataFrame):
    """``(jvm, jdf)`` of a classic (py4j) DataFrame, or a one-line error on Spark Connect."""
    try:
        jdf = df._jdf
        jvm = df.sparkSession.sparkContext._jvm
    except Exception as exc:  # Spark Connect raises PySparkAttributeError / NotImplementedError
        raise FastForeachUnavailable(
            "the fast foreach path needs a classic Spark session with py4j access to the JVM; this "
            f"DataFrame has none ({type(exc).__name__}: Spark Connect, serverless, or Databricks standard "
            "access mode): use writeStream.foreach(writer) there") from None
    if jvm is None:
        raise FastForeachUnavailable("the Spark session has no JVM gateway (is it stopped?)")
    return jvm, jdf


def build_jvm_writer(df: DataFrame, writer: Any, *, worker_batch_rows: int = 4096,
                     worker_batch_bytes: int = 1 << 20, **old_names: Any):
    """The Java ``ForeachWriter`` (a py4j object) running ``writer`` for ``df``'s rows.

    The Python function and the schema are made the way ``DataStreamWriter.foreach``
    makes them, so ``writer`` behaves exactly as under stock ``foreach``.
    """
    caps = take_old_names("build_jvm_writer", old_names, OLD_NAMES,
                          {"worker_batch_rows": worker_batch_rows, "worker_batch_bytes": worker_batch_bytes},
                          _DEFAULTS)
    worker_batch_rows, worker_batch_bytes = caps["worker_batch_rows"], caps["worker_batch_bytes"]
    for name, value in (("worker_batch_rows", worker_batch_rows), ("worker_batch_bytes", worker_batch_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if worker_batch_rows > 2**31 - 1:
        raise ValueError(f"worker_batch_rows must fit a Java int, got {worker_batch_rows}")
    jvm, jdf = _classic_handles(df)
    check_runtime(df.sparkSession)

    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JError
    from pyspark.core.rdd import _wrap_function
    from pyspark.serializers import AutoBatchedSerializer, CPickleSerializer

    writer_class = jvm
    for part in WRITER_CLASS.split("."):
        writer_class = getattr(writer_class, part)
    if not isinstance(writer_class, JavaClass):
        try:
            jars = foreach_jars()
        except FastForeachUnavailable as exc:
            raise FastForeachUnavailable(f"class {WRITER_CLASS} is not on the session's classpath and {exc}") \
                from None
        raise FastForeachUnavailable(
            f"class {WRITER_CLASS} is not on the session's classpath: start the session with spark.jars "
            f"including {jars[0]} (foreach_jars() gives it), or attach the jar to the cluster")
    # PySpark's own steps in DataStreamWriter.foreach: same function, same serializer.
    func = df.writeStream._construct_foreach_function(writer)
    serializer = AutoBatchedSerializer(CPickleSerializer())
    sc = df.sparkSession.sparkContext
    wrapped = _wrap_function(sc, func, serializer, serializer)
    try:
        return writer_class(wrapped, jdf.schema(), int(worker_batch_rows),
                            jvm.java.lang.Long(str(worker_batch_bytes)))
    except Py4JError as exc:
        raise FastForeachUnavailable(f"the fast foreach writer could not be created: {str(exc).splitlines()[0]}") \
            from None


# --8<-- [start:start_foreach_query]
def start_foreach_query(df: DataFrame, writer: Any, *, checkpoint_location: str,
                        trigger: Mapping[str, Any] | None = None, output_mode: str = "update",
                        query_name: str | None = None, worker_batch_rows: int = 4096,
                        worker_batch_bytes: int = 1 << 20, **old_names: Any) -> StreamingQuery:
    """Start ``df.writeStream.foreach(writer)`` with rows reaching ``writer`` within milliseconds.

    - ``writer``: what ``DataStreamWriter.foreach`` takes, unchanged: an object with
      ``process(row)`` and optional ``open(partition_id, epoch_id)`` / ``close(error)``,
      or a function of one row. Same contract as stock ``foreach``.
    - ``trigger``: keyword arguments of ``DataStreamWriter.trigger``, e.g.
      ``{"realTime": "5 minutes"}`` (the default; the duration is the checkpoint
      interval, not a latency) or ``{"processingTime": "0 seconds"}``.
    - ``worker_batch_rows`` / ``worker_batch_bytes``: caps of one batch of rows sent to
      the Python worker; a batch is whatever rows are waiting, at least one. (Not the
      writer's flush size: that is ``SinkSettings.max_batch_rows``. The old names
      ``max_batch_rows``/``max_batch_bytes`` here still work, with a warning.)

    Raises :class:`FastForeachUnavailable` for a missing or stale jar, Spark Connect,
    a Databricks runtime or an open-source release it is not proven on; ``ValueError`` for bad arguments.
    """
    trigger = dict(trigger) if trigger is not None else {"realTime": "5 minutes"}
    if len(trigger) != 1:
        raise ValueError(f"trigger must have exactly one entry, e.g. {{'realTime': '5 minutes'}}, got {trigger!r}")
    caps = take_old_names("start_foreach_query", old_names, OLD_NAMES,
                          {"worker_batch_rows": worker_batch_rows, "worker_batch_bytes": worker_batch_bytes},
                          _DEFAULTS)
    jwriter = build_jvm_writer(df, writer, **caps)
    stream = df.writeStream
    stream._jwrite = stream._jwrite.foreach(jwriter)  # in place of PySpark's PythonForeachWriter
    stream = stream.outputMode(output_mode).option("checkpointLocation", checkpoint_location).trigger(**trigger)
    if query_name:
        stream = stream.queryName(query_name)
    return stream.start()
# --8<-- [end:start_foreach_query]


__all__ = ["DEFAULT_JAR", "PROVEN_RELEASES", "FastForeachUnavailable", "WRITER_CLASS", "build_jvm_writer",
           "check_runtime", "check_version", "databricks_runtime",
           "foreach_jars", "start_foreach_query"]
