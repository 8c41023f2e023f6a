"""Stream numbered rows through the pack's sinks on a Spark cluster, supervised, and check the tables.

The driver side of the cluster tests and of ``benchmarks/soak.py``:

- :class:`PathRun` — one sink path (``rtm_jvm``: real-time mode + the JVM sink;
  ``rtm_python``: real-time mode + the Python ``PostgresForeachWriter``;
  ``rtm_fast``: real-time mode + the same Python writer through the fast foreach path
  (``rtm_lakebase.foreach.start_foreach_query``);
  ``mb_python``: micro-batch + the Python writer) with its own source, table and
  checkpoint. Its :meth:`PathRun.supervise` restarts a failed query from the same
  checkpoint — the recovery recipe the reference gives — and records why it failed.
- Sources (``--source``): ``rate`` (default) is the lab's deterministic rate source
  (``pack_lab/rate_source.py``): row ``i`` is due at ``start_ms + i * 1000 / rate``, nothing is
  fed or held, a restart replays the same rows; :class:`RateSchedule` only tracks how many rows
  are due. ``memory`` is Spark's ``LowLatencyMemoryStream`` (``RealTimeMemorySource``) fed by
  :class:`Feeder`, which adds rows ``id = 0, 1, 2, …`` carrying ``sent_ms`` at a fixed rate; it
  holds every row and slows as it holds more (too slow for a 30-minute soak).
- :func:`table_report` — missing and duplicated ids, sink-visible latency.

Run alone it is the subprocess driver the cluster tests start (they own the
cluster and Postgres, and inject the faults)::

    python -m pack_lab.cluster_stream --master spark://127.0.0.1:7077 --dsn "host=… " \
        --paths rtm_jvm,rtm_python,mb_python --rate 200 --seconds 60 [--source rate|memory] --out result.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PATHS = ("rtm_jvm", "rtm_python", "rtm_fast", "mb_python")
SOURCES = ("rate", "memory")
#: How far ahead of "now" the rate source's row 0 is due: the queries start meanwhile.
RATE_LEAD_MS = 3000
SCHEMA = "id BIGINT, sent_ms BIGINT, payload STRING"
PAYLOAD = "x" * 64


def table_ddl(table: str):
    """``CREATE TABLE`` for one path's table (a ``psycopg.sql`` object)."""
    from psycopg import sql

    from pack_lab.sink_clock import WRITTEN_MS_COLUMN

    return sql.SQL("CREATE TABLE IF NOT EXISTS {} (id bigint PRIMARY KEY, sent_ms bigint NOT NULL, "
                   "payload text, " + WRITTEN_MS_COLUMN + ")").format(sql.Identifier(table))


def app_name(path: str) -> str:
    """``application_name`` each path's connections carry, so ``pg_stat_activity`` tells them apart."""
    return f"rtm-cluster-{path}"


def with_app_name(dsn: str, name: str) -> str:
    from rtm_lakebase.postgres import as_connection_settings

    settings = as_connection_settings(dsn)
    import dataclasses

    return dataclasses.replace(settings, application_name=name)


def session_jars(source: str = "rate", paths: Sequence[str] = PATHS) -> list[str]:
    """The jars a cluster driver needs for ``paths`` and ``source``; a missing or stale one fails, naming the build.

    The JVM sink's jars always (they carry the JDBC driver), the fast foreach path's with
    ``rtm_fast``, the rate source's with ``source="rate"``.
    """
    from rtm_lakebase.jvm import jvm_sink_jars

    jars = jvm_sink_jars()
    if "rtm_fast" in paths:
        from rtm_lakebase.foreach import foreach_jars

        jars += foreach_jars()
    if source == "rate":
        from pack_lab.rate_source import rate_source_jars

        jars += rate_source_jars()
    return jars


def cluster_session(master_conf: dict[str, str], app: str = "rtm-cluster-driver", jvm_log: str | None = None,
                    source: str = "rate", paths: Sequence[str] = PATHS):
    """A driver session on the cluster with :func:`session_jars` on ``spark.jars`` (driver and executors)."""
    from pack_lab.rtm_lab import build_session

    jars = session_jars(source, paths)
    conf = dict(master_conf)
    conf.setdefault("spark.task.maxFailures", "8")
    spark = build_session(cores=1, shuffle_partitions=1, jars=jars, app_name=app,
                          extra_conf=conf, jvm_log=jvm_log)
    if jvm_log is not None:  # task losses and retries are logged at WARN
        spark.sparkContext.setLogLevel("WARN")
    return spark


@dataclass
class QueryEvent:
    at: float
    path: str
    what: str
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"t_s": round(self.at, 1), "path": self.path, "what": self.what, "detail": self.detail}


@dataclass(frozen=True)
class RatePlan:
    """The rate source's rows for one run: ``total_rows`` rows, row ``i`` due at ``start_ms + i * 1000 / rate``."""

    rate: int
    total_rows: int
    start_ms: int

    @classmethod
    def starting_soon(cls, rate: int, seconds: float, lead_ms: int = RATE_LEAD_MS) -> RatePlan:
        return cls(rate, int(rate * seconds), int(time.time() * 1000) + lead_ms)

    def due(self, now_ms: int | None = None) -> int:
        """Rows due by ``now_ms`` (the source emits no row before its ``sent_ms``), capped at ``total_rows``."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if now_ms < self.start_ms:
            return 0
        return min(self.total_rows, ((now_ms - self.start_ms + 1) * self.rate + 999) // 1000)


@dataclass
class PathRun:
    """One sink path: source, table, checkpoint, running query; restarted from its checkpoint on failure.

    ``source="rate"`` needs ``plan`` (every start, restarts included, reads the same rows);
    ``source="memory"`` creates a ``RealTimeMemorySource`` that a :class:`Feeder` fills.
    """

    spark: Any
    path: str
    dsn: str
    table: str
    checkpoint: str
    trigger_s: int = 5
    t0: float = field(default_factory=time.monotonic)
    events: list[QueryEvent] = field(default_factory=list)
    query: Any = None
    restarts: int = 0
    source_kind: str = "memory"
    plan: RatePlan | None = None

    def __post_init__(self) -> None:
        from pack_lab.rtm_lab import RealTimeMemorySource

        if self.path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {self.path!r}")
        if self.source_kind not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source_kind!r}")
        self.source = None
        if self.source_kind == "memory":
            self.source = RealTimeMemorySource(self.spark, SCHEMA, num_partitions=1)
        elif self.plan is None:
            raise ValueError("source 'rate' needs a RatePlan (rate, total_rows, start_ms)")

    def dataframe(self) -> Any:
        if self.source is not None:
            return self.source.dataframe()
        from pack_lab.rate_source import rate_stream

        return rate_stream(self.spark, self.plan.rate, self.plan.total_rows, self.plan.start_ms, payload=PAYLOAD)

    def event(self, what: str, detail: str = "") -> None:
        self.events.append(QueryEvent(time.monotonic() - self.t0, self.path, what, detail))

    def start(self) -> None:
        df = self.dataframe()
        name = f"{self.path}_{self.table}"
        settings = with_app_name(self.dsn, app_name(self.path))
        if self.path == "rtm_jvm":
            from rtm_lakebase.jvm import start_jvm_sink_query

            self.query = start_jvm_sink_query(
                df, dsn=settings, table=self.table, key_columns=("id",), checkpoint_location=self.checkpoint,
                trigger={"realTime": f"{self.trigger_s} seconds"}, query_name=name, max_dwell_ms=20)
        else:
            from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

            writer = PostgresForeachWriter(settings, SinkSettings(table=self.table, key_columns=("id",),
                                                                  max_dwell_ms=20))
            trigger = ({"processingTime": "0 seconds"} if self.path == "mb_python"
                       else {"realTime": f"{self.trigger_s} seconds"})
            if self.path == "rtm_fast":
                from rtm_lakebase.foreach import start_foreach_query

                self.query = start_foreach_query(df, writer, checkpoint_location=self.checkpoint, trigger=trigger,
                                                 query_name=name)
            else:
                self.query = (df.writeStream.foreach(writer).outputMode("update").queryName(name)
                              .option("checkpointLocation", self.checkpoint).trigger(**trigger).start())
        self.event("started" if not self.restarts else "restarted")

    def supervise(self) -> bool:
        """Restart the query from its checkpoint if it died; True when it had to."""
        if self.query is None or self.query.isActive:
            return False
        error = self.query.exception()
        detail = "stopped without an error"
        if error is not None:
            text = str(getattr(error, "desc", None) or error)
            lines = [line for line in text.splitlines() if line.strip()]
            detail = " | ".join(lines[:2])[:400]
        self.event("failed", detail)
        self.restarts += 1
        self.start()
        return True

    def stop(self) -> None:
        if self.query is not None:
            with contextlib.suppress(Exception):
                self.query.stop()


class Feeder(threading.Thread):
    """Adds ``rate`` rows/s to each path's source in 10 chunks a second; ids are consecutive per path."""

    def __init__(self, runs: Sequence[PathRun], rate: int, seconds: float):
        super().__init__(name="feeder", daemon=True)
        self.runs = list(runs)
        self.rate = rate
        self.seconds = seconds
        self.sent = 0
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            start = time.monotonic()
            tick = 0
            while not self.halt.is_set() and time.monotonic() - start < self.seconds:
                target = int(self.rate * (time.monotonic() - start))
                count = target - self.sent
                if count > 0:
                    now = int(time.time() * 1000)
                    rows = [(self.sent + i, now, PAYLOAD) for i in range(count)]
                    for run in self.runs:
                        run.source.add(rows)
                    self.sent += count
                tick += 1
                self.halt.wait(max(0.0, start + tick * 0.1 - time.monotonic()))
        except BaseException as exc:
            self.error = exc


class RateSchedule(threading.Thread):
    """The rate source's counterpart of :class:`Feeder`: feeds nothing, ends when the last row is due.

    ``sent`` is how many rows are due by now, the same count ``Feeder.sent`` gives.
    """

    def __init__(self, plan: RatePlan):
        super().__init__(name="rate-schedule", daemon=True)
        self.plan = plan
        self.halt = threading.Event()
        self.error: BaseException | None = None
        self.end_ms = plan.start_ms + (plan.total_rows * 1000 + plan.rate - 1) // plan.rate

    @property
    def sent(self) -> int:
        return self.plan.due()

    def run(self) -> None:
        while not self.halt.is_set() and time.time() * 1000 < self.end_ms:
            self.halt.wait(min(1.0, max(0.0, self.end_ms / 1000 - time.time())))


def start_rows(runs: Sequence[PathRun], rate: int, seconds: float) -> Feeder | RateSchedule:
    """Start whatever brings the runs' rows: a :class:`RateSchedule` for the rate source, else a :class:`Feeder`."""
    kinds = {r.source_kind for r in runs}
    plans = {r.plan for r in runs}
    if kinds == {"rate"} and len(plans) == 1:
        feeder: Feeder | RateSchedule = RateSchedule(plans.pop())
    elif kinds == {"memory"}:
        feeder = Feeder(runs, rate, seconds)
    else:
        raise ValueError("all paths of a run must use one source and, for 'rate', one RatePlan")
    feeder.start()
    return feeder


def table_report(conn: Any, table: str, expected: int, window_s: float | None = None,
                 t0_ms: int | None = None) -> dict[str, Any]:
    """Missing and duplicated ids among ``0 … expected-1`` and sink-visible latency (ms) percentiles."""
    from psycopg import sql

    from pack_lab.sink_clock import visible_clock

    clock, _ = visible_clock(conn)  # a fixed SQL expression of the pack's, not user input
    target = sql.Identifier(table)
    rows, distinct, in_range = conn.execute(
        sql.SQL("SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE id >= 0 AND id < %s) FROM {}")
        .format(target), (expected,)).fetchone()
    pct = sql.SQL("percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY lat), max(lat), count(*)")
    lat_sql = sql.SQL("SELECT " + clock + " - sent_ms AS lat, sent_ms FROM {}").format(target)
    p50, p90, p99 = (None, None, None)
    whole = conn.execute(sql.SQL("SELECT {} FROM ({}) s").format(pct, lat_sql)).fetchone()
    if whole[0] is not None:
        p50, p90, p99 = whole[0]
    report = {"expected": expected, "rows": rows, "distinct_ids": distinct,
              "missing": expected - in_range if in_range <= expected else 0,
              "duplicated": rows - distinct, "unexpected_ids": rows - in_range,
              "latency_ms": {"p50": p50, "p90": p90, "p99": p99, "max": whole[1]}}
    if window_s and t0_ms is not None:
        windows = conn.execute(
            sql.SQL("SELECT floor((sent_ms - %s) / %s)::int AS w, {} FROM ({}) s GROUP BY 1 ORDER BY 1")
            .format(pct, lat_sql), (t0_ms, window_s * 1000)).fetchall()
        report["latency_windows"] = [
            {"window": w, "from_s": w * window_s, "p50": q[0], "p90": q[1], "p99": q[2], "max": mx, "rows": n}
            for w, q, mx, n in windows]
    return report


def wait_for_rows(conn_factory: Callable[[], Any], tables: dict[str, str], expected: int,
                  timeout_s: float, supervise: Callable[[], None] = lambda: None) -> bool:
    """Poll until every table holds ``expected`` distinct ids (reconnecting as needed); False on timeout."""
    from psycopg import sql

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        supervise()
        try:
            with conn_factory() as conn:
                counts = [conn.execute(sql.SQL("SELECT count(DISTINCT id) FROM {}").format(sql.Identifier(t)))
                          .fetchone()[0] for t in tables.values()]
            if all(c >= expected for c in counts):
                return True
        except Exception:
            pass
        time.sleep(1.0)
    return False


def scheduler_log(jvm_log: Path) -> dict[str, Any]:
    """What the driver's scheduler logged about lost executors and tasks (WARN/ERROR lines)."""
    lost_executors, lost_tasks = [], []
    with contextlib.suppress(OSError):
        for line in jvm_log.read_text(errors="replace").splitlines():
            if "Lost executor" in line:
                lost_executors.append(line[line.find("Lost executor"):][:200])
            elif "Lost task" in line and "TaskKilled" not in line:
                lost_tasks.append(line[line.find("Lost task"):][:300])
    return {"lost_executors": lost_executors, "lost_tasks": lost_tasks}


def run_driver(master_conf: dict[str, str], dsn: str, paths: Sequence[str], rate: int, seconds: float,
               workdir: Path, drain_timeout_s: float = 180, trigger_s: int = 5, source: str = "rate",
               progress: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)) -> dict:
    """Create the tables, run every path at ``rate`` rows/s for ``seconds``, drain, report."""
    import psycopg

    tables = {p: f"cl_{p}_{os.getpid()}" for p in paths}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables.values():
            conn.execute(table_ddl(table))
    spark = cluster_session(master_conf, jvm_log=str(workdir / "driver-jvm.log"), source=source, paths=paths)
    checkpoints = Path(tempfile.mkdtemp(prefix="checkpoints-", dir=workdir))  # fresh: an old offset would skip rows
    plan = RatePlan.starting_soon(rate, seconds) if source == "rate" else None
    runs = [PathRun(spark, p, dsn, tables[p], str(checkpoints / p), trigger_s=trigger_s, source_kind=source,
                    plan=plan) for p in paths]
    t0_ms = plan.start_ms if plan else int(time.time() * 1000)
    try:
        for run in runs:
            run.start()
        progress(json.dumps({"event": "started", "tables": tables, "source": source}))
        feeder = start_rows(runs, rate, seconds)
        while feeder.is_alive():
            for run in runs:
                run.supervise()
            feeder.join(timeout=1.0)
        if feeder.error is not None:
            raise RuntimeError(f"feeding the source failed: {feeder.error}")
        progress(json.dumps({"event": "fed", "rows": feeder.sent}))

        def supervise_all() -> None:
            for run in runs:
                run.supervise()

        drained = wait_for_rows(lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=5), tables,
                                feeder.sent, drain_timeout_s, supervise_all)
        with psycopg.connect(dsn, autocommit=True) as conn:
            reports = {p: table_report(conn, tables[p], feeder.sent) for p in paths}
        return {"source": source, "rows_per_path": feeder.sent, "drained": drained, "tables": tables, "paths": reports,
                "events": [e.as_dict() for r in runs for e in r.events],
                "restarts": {r.path: r.restarts for r in runs}, "t0_ms": t0_ms,
                "scheduler": scheduler_log(workdir / "driver-jvm.log")}
    finally:
        for run in runs:
            run.stop()
        with contextlib.suppress(Exception):
            spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", required=True, help="spark://127.0.0.1:PORT")
    parser.add_argument("--conf", default="{}", help="extra Spark settings as a JSON object")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--drain-timeout", type=float, default=180)
    parser.add_argument("--source", choices=SOURCES, default="rate",
                        help="rate: the lab's deterministic rate source (default); memory: LowLatencyMemoryStream")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if bad:
        parser.error(f"unknown path(s) {bad}; choose from {list(PATHS)}")
    conf = dict(json.loads(args.conf), **{"spark.master": args.master})
    workdir = Path(args.out).resolve().parent
    try:
        result = run_driver(conf, args.dsn, paths, args.rate, args.seconds, workdir, args.drain_timeout,
                            source=args.source)
    except KeyboardInterrupt:
        print("cluster_stream: interrupted", file=sys.stderr)
        return 130
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
