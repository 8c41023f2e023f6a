"""End-to-end demo: simulated upstream → real-time-mode query → idempotent foreach sink → Postgres.

Run it with ``bash scripts/demo.sh`` (or ``python -m pack_lab.demo --help``).
It starts a local SparkSession sized for the query, a throwaway Postgres
unless ``PG_DSN`` is set, and a real-time query (``trigger(realTime=...)``,
update mode) that deduplicates the upstream's retried events and upserts
them into a fresh table. The simulator feeds events at a set rate with a
share of duplicates; progress is printed every second. At the end the demo
checks the table holds exactly one row per distinct event sent — no row
lost, none duplicated — prints the end-to-end latency (row handed to the
source → row committed in Postgres) and exits non-zero if the check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

#: Exit codes: 0 all rows verified, 1 the run failed or the table does not match, 2 bad arguments/environment.
EXIT_OK, EXIT_MISMATCH, EXIT_ENV = 0, 1, 2


@dataclass(frozen=True)
class DemoOptions:
    rows: int = 20_000
    rows_per_second: float = 2_000.0
    keys: int = 500
    duplicate_pct: float = 5.0
    partitions: int = 2
    pipeline: str = "dedup"          # "dedup" (stateful) or "passthrough" (stateless)
    trigger: str = "5 seconds"
    max_batch_rows: int = 1_000
    max_dwell_ms: int = 100
    timeout_s: float = 120.0
    keep_table: bool = False
    seed: int = 7

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError("--rows must be at least 1")
        if self.pipeline not in ("dedup", "passthrough"):
            raise ValueError("--pipeline must be 'dedup' or 'passthrough'")
        if self.timeout_s <= 0:
            raise ValueError("--timeout must be positive")


def demo_table_ddl(table: str):
    """The demo's target table: one row per event, with Postgres' own commit clock."""
    from psycopg import sql

    return sql.SQL("""
        CREATE TABLE {table} (
            event_id   text PRIMARY KEY,
            device_id  text NOT NULL,
            event_ms   bigint NOT NULL,
            sent_ms    bigint NOT NULL,
            value      double precision,
            payload    text,
            seq        bigint NOT NULL,
            ingest_ms  bigint,
            written_ms bigint NOT NULL
                DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
        ) WITH (fillfactor = 90)
    """).format(table=sql.Identifier(table))


def build_pipeline(events, pipeline: str):
    """The streaming DataFrame the demo writes: per-row ingest time, dedup if asked."""
    from rtm_lakebase.pipelines import dedup_events, with_ingest_time

    stamped = with_ingest_time(events).drop("event_time")
    return dedup_events(stamped) if pipeline == "dedup" else stamped


def make_writer(dsn: str, table: str, options: DemoOptions):
    """The idempotent upsert writer: key ``event_id``, a replayed row (same ``seq``) is skipped."""
    from rtm_lakebase.lakebase_sink import PostgresForeachWriter, SinkSettings

    settings = SinkSettings(
        table=table,
        mode="upsert",
        key_columns=("event_id",),
        version_column="seq",          # a replay carries the same seq: never rewrites a row
        max_batch_rows=options.max_batch_rows,
        max_dwell_ms=options.max_dwell_ms,
    )
    return PostgresForeachWriter(dsn, settings)


def wait_until_processing(query, timeout_s: float = 60.0) -> None:
    """Block until the query's long batch is running, so start-up is not counted as latency."""
    deadline = time.monotonic() + timeout_s
    while query.status.get("message") != "Processing new data":
        if not query.isActive:
            raise RuntimeError(f"the streaming query stopped while starting: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the streaming query did not start within {timeout_s:.0f}s: "
                               f"{query.status}")
        time.sleep(0.1)
    time.sleep(1.0)  # let the long batch's tasks get scheduled


def latency_percentiles(conn, table: str) -> dict[str, float]:
    """End-to-end latency (``written_ms - sent_ms``) percentiles computed by Postgres."""
    from psycopg import sql

    query = sql.SQL("""
        SELECT percentile_cont(0.5)  WITHIN GROUP (ORDER BY written_ms - sent_ms),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY written_ms - sent_ms),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY written_ms - sent_ms),
               max(written_ms - sent_ms)
        FROM {table}
    """).format(table=sql.Identifier(table))
    p50, p95, p99, worst = conn.execute(query).fetchone()
    return {"p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "max_ms": worst}


def count_rows(conn, table: str) -> int:
    from psycopg import sql

    return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]


def stored_ids(conn, table: str) -> set[str]:
    from psycopg import sql

    rows = conn.execute(sql.SQL("SELECT event_id FROM {}").format(sql.Identifier(table))).fetchall()
    return {row[0] for row in rows}


@dataclass
class DemoResult:
    rows_sent: int
    duplicates_sent: int
    distinct_sent: int
    rows_in_table: int
    missing: int
    unexpected: int
    seconds: float
    latency: dict[str, float]

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.unexpected == 0 and self.rows_in_table == self.distinct_sent


def run_demo(options: DemoOptions, dsn: str, log: Callable[[str], None] = print) -> DemoResult:
    """Run the whole pipeline against ``dsn``; return what was sent and what landed."""
    import psycopg
    from psycopg import sql

    from pack_lab.rtm_lab import RealTimeMemorySource, build_session, local_cores
    from rtm_lakebase.slot_math import check_local, stateful_query
    from pack_lab.upstream_simulator import EVENT_SCHEMA_DDL, UpstreamFeeder, UpstreamSpec

    shuffle_partitions = 2
    shape = stateful_query(source_tasks=options.partitions, shuffle_partitions=shuffle_partitions,
                           exchanges=1 if options.pipeline == "dedup" else 0)
    log(f"[demo] query needs {shape.required_slots} task slots ({options.partitions} source "
        f"+ {sum(shape.shuffle_stages)} shuffle partitions)")
    spark = build_session(cores=shape.required_slots, shuffle_partitions=shuffle_partitions,
                          app_name="rtm-demo")
    # getOrCreate may hand back a session that was already running: check its real slots.
    local = check_local(shape, local_cores(spark))
    if not local.fits:
        raise RuntimeError(local.message)

    table = f"rtm_demo_{int(time.time())}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(demo_table_ddl(table))
        log(f"[demo] created table {table}")
        source = RealTimeMemorySource(spark, EVENT_SCHEMA_DDL, num_partitions=options.partitions)
        events = build_pipeline(source.dataframe(), options.pipeline)
        checkpoint = tempfile.mkdtemp(prefix="rtm-demo-checkpoint-")
        writer = make_writer(dsn, table, options)
        query = (events.writeStream
                 .queryName("rtm_demo")
                 .foreach(writer)
                 .outputMode("update")
                 .trigger(realTime=options.trigger)
                 .option("checkpointLocation", checkpoint)
                 .start())
        spec = UpstreamSpec(rows_per_second=options.rows_per_second, total_rows=options.rows,
                            num_keys=options.keys, duplicate_pct=options.duplicate_pct,
                            num_partitions=options.partitions, seed=options.seed)
        feeder = UpstreamFeeder(source, spec, keep_rows=True)
        started = time.monotonic()
        try:
            wait_until_processing(query)
            started = time.monotonic()
            feeder.start()
            expected_total = spec.row_limit or 0
            next_log = 0.0
            while True:
                elapsed = time.monotonic() - started
                stats = feeder.stats()
                in_table = count_rows(conn, table)
                if elapsed >= next_log:
                    log(f"[demo] {elapsed:5.1f}s sent={stats.rows_sent}/{expected_total} "
                        f"dups={stats.duplicates_sent} in_table={in_table}")
                    next_log = elapsed + 1.0
                if not query.isActive:
                    raise RuntimeError(f"the streaming query stopped: {query.exception()}")
                if feeder.error is not None:
                    raise RuntimeError(f"the upstream simulator failed: {feeder.error!r}")
                if stats.done and in_table >= stats.distinct_events:
                    break
                if elapsed > options.timeout_s:
                    log(f"[demo] timed out after {options.timeout_s:.0f}s with {in_table} of "
                        f"{stats.distinct_events} rows in the table")
                    break
                time.sleep(0.2)
            seconds = time.monotonic() - started
        finally:
            feeder.stop()
            feeder.join(raise_error=False)
            query.stop()
        stats = feeder.stats()
        sent_ids = {row["event_id"] for row in feeder.sent_rows}
        landed = stored_ids(conn, table)
        result = DemoResult(
            rows_sent=stats.rows_sent, duplicates_sent=stats.duplicates_sent,
            distinct_sent=len(sent_ids), rows_in_table=len(landed),
            missing=len(sent_ids - landed), unexpected=len(landed - sent_ids),
            seconds=seconds, latency=latency_percentiles(conn, table) if landed else {},
        )
        if not options.keep_table:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        else:
            log(f"[demo] kept table {table}")
    return result


def format_result(result: DemoResult) -> str:
    lat = result.latency
    lines = [
        f"sent {result.rows_sent} rows ({result.duplicates_sent} duplicates, "
        f"{result.distinct_sent} distinct events) in {result.seconds:.1f}s",
        f"table holds {result.rows_in_table} rows: {result.missing} missing, "
        f"{result.unexpected} unexpected",
    ]
    if lat:
        lines.append("end-to-end latency (sent → committed in Postgres): "
                     f"p50 {lat['p50_ms']:.0f} ms, p95 {lat['p95_ms']:.0f} ms, "
                     f"p99 {lat['p99_ms']:.0f} ms, max {lat['max_ms']:.0f} ms")
    lines.append("RESULT: OK — every distinct event landed exactly once" if result.ok
                 else "RESULT: FAILED — the table does not match what was sent")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> DemoOptions:
    defaults = DemoOptions()
    parser = argparse.ArgumentParser(prog="pack_lab.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=defaults.rows, help="rows the upstream sends")
    parser.add_argument("--rate", type=float, default=defaults.rows_per_second, help="rows per second")
    parser.add_argument("--keys", type=int, default=defaults.keys, help="distinct devices")
    parser.add_argument("--duplicate-pct", type=float, default=defaults.duplicate_pct,
                        help="share of rows that are upstream retries")
    parser.add_argument("--partitions", type=int, default=defaults.partitions,
                        help="source partitions")
    parser.add_argument("--pipeline", choices=("dedup", "passthrough"), default=defaults.pipeline)
    parser.add_argument("--trigger", default=defaults.trigger,
                        help="real-time trigger duration (checkpoint interval, >= 5 seconds)")
    parser.add_argument("--max-batch-rows", type=int, default=defaults.max_batch_rows)
    parser.add_argument("--max-dwell-ms", type=int, default=defaults.max_dwell_ms)
    parser.add_argument("--timeout", type=float, default=defaults.timeout_s, help="seconds")
    parser.add_argument("--keep-table", action="store_true", help="leave the demo table in place")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    try:
        return DemoOptions(rows=args.rows, rows_per_second=args.rate, keys=args.keys,
                           duplicate_pct=args.duplicate_pct, partitions=args.partitions,
                           pipeline=args.pipeline, trigger=args.trigger,
                           max_batch_rows=args.max_batch_rows, max_dwell_ms=args.max_dwell_ms,
                           timeout_s=args.timeout, keep_table=args.keep_table, seed=args.seed)
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def main(argv: list[str] | None = None) -> int:
    from pack_lab.local_postgres import PostgresUnavailable, postgres_dsn
    from pack_lab.rtm_lab import RealTimeModeUnavailable

    options = parse_args(argv)
    try:
        with contextlib.ExitStack() as stack:
            dsn = stack.enter_context(postgres_dsn())
            result = run_demo(options, dsn)
    except (PostgresUnavailable, RealTimeModeUnavailable) as exc:
        print(f"[demo] cannot run: {exc}", file=sys.stderr)
        return EXIT_ENV
    except RuntimeError as exc:  # too few slots, the query died, the simulator failed
        print(f"[demo] failed: {exc}", file=sys.stderr)
        return EXIT_MISMATCH
    print(format_result(result))
    return EXIT_OK if result.ok else EXIT_MISMATCH


if __name__ == "__main__":
    raise SystemExit(main())
