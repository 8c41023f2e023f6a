"""Real-time-mode query (open-source Spark 4.3) writing price updates into Postgres within milliseconds.

    from solution import start
    query = start(df, "host=127.0.0.1 port=5432 dbname=app user=app password=...", "events", "/tmp/ck/events")

Why not a plain ``df.writeStream.foreach(writer).trigger(realTime=...)``
-----------------------------------------------------------------------
In open-source Spark the engine moves a row through a real-time query in
milliseconds, but a *Python* ``foreach`` writer sees it seconds later: the JVM
side pickles rows in batches that start at one row and DOUBLE until a pickled
batch passes 1 MB (``SerDeUtil.AutoBatchedPickler``), and the runner sends to
the worker only when ``spark.buffer.size`` (64 KB) is full or the long batch
ends. At ~100 rows/s neither fills, so rows wait up to the whole trigger
duration (measured in the spark-rtm-lakebase pack: p99 ~10 s at 50-200 rows/s).
That misses a 1.5 s p99 by far. So ``start`` uses, in this order:

1. The fast foreach path, when its JVM class
   ``rtm_lakebase.foreach.LowLatencyPythonForeachWriter`` is on the session's
   classpath (jar on ``spark.jars``): it hands the worker whatever rows are
   waiting as soon as the worker can take them (measured p50 ~16 ms, p99 < 150 ms
   at 50-1000 rows/s). The same Python writer below runs inside it.
2. Otherwise stock ``foreach`` with a 1 MiB padding column added in the JVM.
   Every pickled row is then >= 1 MiB, so the auto-batching pickler never grows
   past ONE row per batch and every batch is larger than the 64 KB buffer, so it
   is sent at once: each row reaches ``process()`` milliseconds after the engine
   had it (the pack measured this padding at p50 50 ms / p99 70 ms at 50 rows/s).
   The writer drops the padding; it never reaches Postgres. Cost: ~1 MiB of
   JVM->Python traffic per row (~100 MB/s at 100 rows/s, local socket).

The writer (both paths) buffers rows for at most ``MAX_DWELL_MS`` (5 ms) from a
timer thread (under real-time mode ``close()`` only comes at the end of a long
batch), then commits them in ONE ``INSERT ... SELECT FROM unnest(...) ON CONFLICT
(id) DO UPDATE`` transaction: idempotent, so at-least-once replays after a
failure are harmless. Only ``id, sent_ms, payload`` are written; other columns
keep their defaults. ``open()`` never returns False; errors are raised.

The trigger is ``realTime="5 minutes"``: the checkpoint interval, not a latency;
long batches mean few batch boundaries (each boundary restarts the tasks).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any

REAL_TIME_TRIGGER = "5 minutes"
MAX_DWELL_MS = 5
MAX_BATCH_ROWS = 500
PAD_COLUMN = "_rtm_latency_pad"
PAD_CHARS = 1 << 20          # >= 1 MiB pickled: AutoBatchedPickler keeps 1 row per batch
FAST_WRITER_CLASS = "rtm_lakebase.foreach.LowLatencyPythonForeachWriter"
COLUMNS = ("id", "sent_ms", "payload")


class SinkError(RuntimeError):
    """A flush that failed for good (raised, never swallowed)."""


class EventsLatencyWriter:
    """PySpark foreach writer: per-task connection, 5 ms dwell, one upsert per flush."""

    def __init__(self, dsn: str, table: str, max_dwell_ms: int = MAX_DWELL_MS,
                 max_batch_rows: int = MAX_BATCH_ROWS, max_retries: int = 5):
        self.dsn, self.table = dsn, table
        self.max_dwell_ms, self.max_batch_rows, self.max_retries = max_dwell_ms, max_batch_rows, max_retries
        self._reset()

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("dsn", "table", "max_dwell_ms", "max_batch_rows", "max_retries")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"EventsLatencyWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._conn = None
        self._stmt = None
        self._buffer: dict[int, tuple] = {}
        self._oldest: float | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._open = False
        self._positions = None

    # -- connection / statement ------------------------------------------------------
    def _connect(self) -> None:
        import psycopg

        self._close_conn()
        self._conn = psycopg.connect(self.dsn, autocommit=False, application_name="rtm-latency-sink")

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _statement(self):
        from psycopg import sql

        if "." in self.table and not self.table.startswith('"'):
            schema, _, name = self.table.partition(".")
            target = sql.Identifier(schema, name)
        else:
            target = sql.Identifier(self.table.strip('"'))
        return sql.SQL(
            "INSERT INTO {t} AS t (id, sent_ms, payload) "
            "SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) "
            "ON CONFLICT (id) DO UPDATE SET sent_ms = EXCLUDED.sent_ms, payload = EXCLUDED.payload "
            "WHERE (t.sent_ms, t.payload) IS DISTINCT FROM (EXCLUDED.sent_ms, EXCLUDED.payload)"
        ).format(t=target)

    # -- rows ---------------------------------------------------------------------------
    def _values(self, row: Any) -> tuple:
        fields = getattr(row, "__fields__", None)
        if fields is not None:
            if self._positions is None or self._positions[0] != fields:
                self._positions = (list(fields), tuple(list(fields).index(c) for c in COLUMNS))
            i, s, p = self._positions[1]
            values = (row[i], row[s], row[p])
        elif isinstance(row, dict):
            values = tuple(row[c] for c in COLUMNS)
        else:
            values = tuple(row[:3])
        if values[0] is None:
            raise SinkError("row with a null id cannot be upserted (id is the primary key)")
        return values

    # -- flushing ------------------------------------------------------------------------
    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        import psycopg

        rows = [self._buffer[k] for k in sorted(self._buffer)]
        params = ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor(binary=True) as cur:
                    cur.execute(self._stmt, params)
                self._conn.commit()
                break
            except psycopg.Error as exc:
                state = getattr(exc, "sqlstate", None) or ""
                lost = self._conn is None or self._conn.closed or getattr(self._conn, "broken", False)
                if not (lost or state.startswith("08") or state in ("40001", "40P01", "57P01")
                        or (isinstance(exc, psycopg.OperationalError) and not state)):
                    try:
                        self._conn.rollback()
                    except Exception:
                        self._close_conn()
                    raise SinkError(f"flush of {len(rows)} rows into {self.table} failed (first id "
                                    f"{rows[0][0]}): {type(exc).__name__}: {exc}") from None
                self._close_conn()
                attempt += 1
                if attempt > self.max_retries:
                    raise SinkError(f"flush into {self.table} failed after {attempt} attempts: "
                                    f"{type(exc).__name__}: {exc}") from None
                time.sleep(min(2.0, 0.05 * 2 ** (attempt - 1)))
        self._buffer.clear()
        self._oldest = None

    def _timer_loop(self) -> None:
        dwell = self.max_dwell_ms / 1000.0
        while not self._stop.is_set():
            if self._error is not None:  # a failed flush waits for process()/close() to raise it
                self._stop.wait(0.05)
                continue
            with self._lock:  # read and clear under the lock process() sets them under: no lost wake-up
                oldest = self._oldest
                if oldest is None:
                    self._wake.clear()
            if oldest is None:
                self._wake.wait(0.05)  # process() sets it when the buffer gets its first row
                continue
            delay = oldest + dwell - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self._lock:
                if self._error is not None or not self._open:
                    continue
                try:
                    self._flush_locked()
                except BaseException as exc:  # raised by the next process() or close()
                    self._error = exc

    def _raise_stored(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    # -- foreach contract ------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._close_conn()
        self._reset()
        self._stmt = self._statement()
        self._connect()
        self._open = True
        self._timer = threading.Thread(target=self._timer_loop, name="rtm-latency-flusher", daemon=True)
        self._timer.start()
        return True  # never False: Spark would drop the partition's rows silently

    def process(self, row: Any) -> None:
        values = self._values(row)  # the padding column, if any, is simply not read
        with self._lock:
            self._raise_stored()
            self._buffer[values[0]] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
                self._wake.set()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            self._close_conn()
            return
        self._open = False
        self._stop.set()
        self._wake.set()
        if self._timer is not None:
            self._timer.join(timeout=30)
        try:
            with self._lock:
                if error is None:
                    self._raise_stored()
                    self._flush_locked()
                else:
                    self._buffer.clear()  # Spark replays the long batch; the upsert makes that harmless
        finally:
            self._close_conn()


def _ship_this_module_by_value() -> None:
    """Pickle this module's classes by value, so Python workers need not import ``solution``."""
    try:
        from pyspark import cloudpickle

        module = sys.modules.get(__name__)
        if module is not None and __name__ != "__main__":
            cloudpickle.register_pickle_by_value(module)
    except Exception:  # older cloudpickle: workers then import the module by name
        pass


def _fast_writer(df, writer):
    """The JVM LowLatencyPythonForeachWriter running ``writer``, or None when its jar is not loaded."""
    try:
        from py4j.java_gateway import JavaClass
        from pyspark.core.rdd import _wrap_function
        from pyspark.serializers import AutoBatchedSerializer, CPickleSerializer

        jvm = df.sparkSession.sparkContext._jvm
        cls = jvm
        for part in FAST_WRITER_CLASS.split("."):
            cls = getattr(cls, part)
        if not isinstance(cls, JavaClass):
            return None
        func = df.writeStream._construct_foreach_function(writer)
        serializer = AutoBatchedSerializer(CPickleSerializer())
        wrapped = _wrap_function(df.sparkSession.sparkContext, func, serializer, serializer)
        return cls(wrapped, df._jdf.schema(), 4096, jvm.java.lang.Long(str(1 << 20)))
    except Exception:
        return None


def start(df, dsn: str, table: str, checkpoint: str):
    """Start the real-time query writing ``df`` (id, sent_ms, payload) into ``table``; return it."""
    _ship_this_module_by_value()
    df = df.select("id", "sent_ms", "payload")
    writer = EventsLatencyWriter(dsn, table)

    jwriter = _fast_writer(df, writer)
    if jwriter is not None:
        stream = df.writeStream
        stream._jwrite = stream._jwrite.foreach(jwriter)
    else:
        from pyspark.sql import functions as F

        # Not constant-foldable (depends on id), so the plan carries no 1 MiB literal; never null.
        padded = df.withColumn(PAD_COLUMN, F.expr(
            f"repeat(' ', {PAD_CHARS} + coalesce(cast(id * 0 AS INT), 0))"))
        stream = padded.writeStream.foreach(writer)

    return (stream.outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=REAL_TIME_TRIGGER)
            .start())
