"""Benchmark the Postgres foreach sink against raw COPY and naive writers, then through Spark.

Run from the repository root::

    .venv/bin/python benchmarks/sink_benchmark.py            # about 3-5 minutes on 2 cores
    .venv/bin/python benchmarks/sink_benchmark.py --quick    # seconds, small sizes
    .venv/bin/python benchmarks/sink_benchmark.py --no-spark --rows 100000

Part 1 writes the same rows (bigint key, bigint version, ~80-byte text) into
Postgres with: raw ``COPY`` (the ceiling), the sink's append (COPY), upsert and
insert-ignore modes, the unnest upsert's rejected alternative (``executemany``
in pipeline mode), a plain ``INSERT`` per row with a commit per batch (the
psycopg2 ``executemany`` pattern), and one ``INSERT`` + commit per row.

Part 2 runs Spark on 2 cores (``local[2]``): the ``rate`` source into the sink
(upsert) and into the ``noop`` sink, at full speed, and the sink at a steady
offered rate to check that batches do not grow; then the lab's real-time source
into the sink and into a no-op ``foreach`` writer in real-time mode.

Prints a table and writes ``benchmarks/results/sink_benchmark.json``. Uses
``PG_DSN`` when set, otherwise a throwaway local Postgres.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "sink_benchmark.json"
COLUMNS = {"id": "bigint", "version": "bigint", "name": "text"}
#: The second ceiling: COPY into the same table the keyed writers use (primary key on id).
KEYED_COPY = "raw COPY into the keyed table"


def say(message: str) -> None:
    print(message, flush=True)


def make_rows(n: int, version: int = 1) -> list[tuple[int, int, str]]:
    pad = "x" * 64
    return [(i, version, f"row-{i:012d}-{pad}") for i in range(n)]


# ---------------------------------------------------------------- part 1 --
def reset_table(conn, table: str, key: bool = True) -> None:
    from psycopg import sql

    from rtm_lakebase.sink.statements import create_table_sql

    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    conn.execute(create_table_sql(table, COLUMNS, ("id",) if key else ()))


def timed(label: str, n: int, action: Callable[[], None], conn, table: str) -> dict[str, Any]:
    from psycopg import sql

    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]
    say(f"  {label:<44} {n:>9,} rows {seconds:7.2f} s {n / seconds:>11,.0f} rows/s")
    return {"name": label, "rows": n, "seconds": round(seconds, 3), "rows_per_s": round(n / seconds),
            "rows_in_table": count}


def bench_direct(dsn: str, n: int, batch: int, repeats: int = 3) -> list[dict[str, Any]]:
    import psycopg
    from psycopg import sql

    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    rows = make_rows(n)
    # The sink receives tuples in column order, as Spark Rows are.
    table = "bench_sink"
    target = sql.Identifier(table)
    results = []
    conn = psycopg.connect(dsn, autocommit=True)

    def raw_copy() -> None:
        with conn.cursor() as cur:
            for start in range(0, n, batch):
                with conn.transaction(), cur.copy(sql.SQL("COPY {} (id, version, name) FROM STDIN").format(target)) as cp:
                    for row in rows[start:start + batch]:
                        cp.write_row(row)

    def through_sink(mode: str, data) -> Callable[[], None]:
        def action() -> None:
            writer = PostgresForeachWriter(dsn, SinkSettings(
                table=table, mode=mode, columns=("id", "version", "name"),
                key_columns=("id",) if mode != "append" else (), max_batch_rows=batch, max_dwell_ms=0))
            writer.open(0, 0)
            process = writer.process
            for row in data:
                process(row)
            writer.close(None)
        return action

    def executemany_upsert() -> None:
        stmt = sql.SQL("INSERT INTO {} AS t (id, version, name) VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE "
                       "SET version = EXCLUDED.version, name = EXCLUDED.name "
                       "WHERE (t.version, t.name) IS DISTINCT FROM (EXCLUDED.version, EXCLUDED.name)").format(target)
        with conn.cursor() as cur:
            for start in range(0, n, batch):
                with conn.transaction():
                    cur.executemany(stmt, rows[start:start + batch])

    def insert_per_row_batched() -> None:
        stmt = sql.SQL("INSERT INTO {} (id, version, name) VALUES (%s, %s, %s)").format(target)
        with conn.cursor() as cur:
            for start in range(0, n_small, batch):
                with conn.transaction():
                    for row in rows[start:min(start + batch, n_small)]:
                        cur.execute(stmt, row)

    def commit_per_row() -> None:
        stmt = sql.SQL("INSERT INTO {} (id, version, name) VALUES (%s, %s, %s)").format(target)
        for row in rows[:n_naive]:
            with conn.transaction():
                conn.execute(stmt, row)

    n_small = max(batch, n // 4)
    n_naive = max(100, n // 20)
    updated = make_rows(n, version=2)
    say(f"part 1: {n:,} rows, flush/commit every {batch:,} rows, one connection, {repeats} interleaved rounds")
    plan = [
        ("raw COPY (ceiling)", n, raw_copy, False, None),
        (KEYED_COPY, n, raw_copy, True, None),
        ("sink append (COPY)", n, through_sink("append", rows), False, None),
        ("sink upsert, new keys (unnest)", n, through_sink("upsert", rows), True, None),
        ("sink upsert, every key updated", n, through_sink("upsert", updated), True, "preload"),
        ("sink upsert, replay (all unchanged)", n, through_sink("upsert", rows), True, "preload"),
        ("sink insert_ignore, new keys", n, through_sink("insert_ignore", rows), True, None),
        ("executemany upsert (pipeline)", n, executemany_upsert, True, None),
        ("plain INSERT per row, commit per batch", n_small, insert_per_row_batched, False, None),
        ("one INSERT + commit per row", n_naive, commit_per_row, False, None),
    ]
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in plan}
    for round_no in range(1, repeats + 1):  # interleaved rounds: background load hits every mode alike
        say(f" round {round_no} of {repeats}")
        for label, count, action, key, prep in plan:
            reset_table(conn, table, key=key)
            if prep == "preload":
                raw_copy()
            conn.execute("CHECKPOINT")
            rounds[label].append({**timed(label, count, action, conn, table), "keyed": key})
    for runs in rounds.values():
        best = dict(max(runs, key=lambda r: r["rows_per_s"]))
        best["all_rounds_rows_per_s"] = [r["rows_per_s"] for r in runs]
        results.append(best)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target))
    conn.close()
    # Ratios pair each writer with the ceiling timed in the same round and keep the median over
    # rounds: on a shared machine the load moves between rounds, and a writer's best round and the
    # ceiling's best round need not be the same moment.
    copy_rounds = [r["rows_per_s"] for r in rounds[plan[0][0]]]
    keyed_rounds = [r["rows_per_s"] for r in rounds[KEYED_COPY]]
    for r in results:
        mine = r["all_rounds_rows_per_s"]
        r["ratio_to_copy"] = round(statistics.median(m / c for m, c in zip(mine, copy_rounds, strict=True)), 3)
        r["ratio_to_copy_per_round"] = [round(m / c, 3) for m, c in zip(mine, copy_rounds, strict=True)]
        # Writes into the keyed table also pay for the primary-key index: compare them with a
        # COPY into that same table as well, not only with a COPY into an unindexed one.
        r["ratio_to_keyed_copy"] = (round(statistics.median(m / c for m, c in zip(mine, keyed_rounds, strict=True)), 3)
                                    if r["keyed"] else None)
    return results


# ---------------------------------------------------------------- part 2 --
class NoopForeachWriter:
    """Does nothing per row; writes its row count to a file so the driver can see progress."""

    def __init__(self, folder: str, every: int = 1000):
        self.folder = folder
        self.every = every

    def open(self, partition_id, epoch_id):
        self.path = os.path.join(self.folder, f"p{partition_id}-e{epoch_id}-{os.getpid()}-{time.time_ns()}")
        self.count = 0
        return True

    def process(self, row):
        self.count += 1
        if self.count % self.every == 0:
            self._save()

    def _save(self):
        with open(self.path, "w") as handle:
            handle.write(str(self.count))

    def close(self, error):
        self._save()


def counted(folder: str) -> int:
    total = 0
    for name in os.listdir(folder):
        try:
            total += int(Path(folder, name).read_text() or 0)
        except (ValueError, FileNotFoundError):
            pass
    return total


def rate_run(spark, seconds: float, rows_per_second: int | None, sink: str, dsn: str, table: str,
             checkpoint: str, trigger: str | None, rows_per_batch: int = 100_000) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    if rows_per_second:  # a steady offered rate
        reader = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second)
    else:  # as fast as the sink goes: a fixed number of rows per micro-batch
        reader = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
    df = (reader.option("numPartitions", 2).load()
          .select(F.col("value").alias("id"), F.lit(1).cast("bigint").alias("version"),
                  F.format_string("row-%012d-%s", F.col("value"), F.lit("x" * 64)).alias("name")))
    if sink == "noop":
        stream = df.writeStream.format("noop")
    else:
        writer = PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",),
                                                         max_batch_rows=1000, max_dwell_ms=100))
        stream = df.writeStream.foreach(writer)
    stream = stream.option("checkpointLocation", checkpoint)
    stream = stream.trigger(processingTime=trigger) if trigger else stream
    query = stream.start()
    try:
        time.sleep(seconds)
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    steady = progress[2:] if len(progress) > 4 else progress  # skip warm-up batches
    rows = sum(p["numInputRows"] for p in steady)
    busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in steady)
    sizes = [p["numInputRows"] for p in steady]
    half = len(sizes) // 2
    return {
        "sink": sink, "source": "rate" if rows_per_second else f"rate-micro-batch ({rows_per_batch:,} rows/batch)",
        "offered_rows_per_s": rows_per_second, "trigger": trigger or "as fast as possible",
        "batches": len(steady), "rows": rows,
        "rows_per_s": round(rows / (busy_ms / 1000)) if busy_ms else None,
        "batch_rows_first_half_avg": round(sum(sizes[:half]) / half) if half else None,
        "batch_rows_second_half_avg": round(sum(sizes[half:]) / (len(sizes) - half)) if sizes[half:] else None,
        "max_batch_ms": max((p["durationMs"].get("triggerExecution", 0) for p in steady), default=None),
        "sustained_rows_per_s": round(sum(p["numInputRows"] for p in progress) / seconds),
    }


def rtm_run(spark, total: int, chunk: int, pause: float, sink: str, dsn: str, table: str,
            checkpoint: str, folder: str, timeout: float) -> dict[str, Any]:
    import psycopg
    from psycopg import sql

    from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    source = RealTimeMemorySource(spark, "id BIGINT, version BIGINT, name STRING", num_partitions=1)
    if sink == "noop":
        os.makedirs(folder, exist_ok=True)
        writer = NoopForeachWriter(folder)
        seen = lambda: counted(folder)
    else:
        writer = PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",),
                                                         max_batch_rows=1000, max_dwell_ms=100))
        conn = psycopg.connect(dsn, autocommit=True)
        count_sql = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
        seen = lambda: conn.execute(count_sql).fetchone()[0]
    query = (source.dataframe().writeStream.foreach(writer).outputMode("update")
             .trigger(realTime=MIN_REAL_TIME_TRIGGER).option("checkpointLocation", checkpoint).start())
    pad = "x" * 64
    try:
        time.sleep(2)  # let the long batch start
        started = time.monotonic()
        for start in range(0, total, chunk):
            source.add([(i, 1, f"row-{i:012d}-{pad}") for i in range(start, min(total, start + chunk))])
            time.sleep(pause)
        fed = time.monotonic() - started
        while seen() < total and time.monotonic() - started < timeout:
            if not query.isActive:
                raise RuntimeError(f"RTM query died: {query.exception()}")
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        done = seen()
    finally:
        query.stop()
        if sink != "noop":
            conn.close()
    return {"sink": sink, "rows": total, "rows_seen": done, "feed_seconds": round(fed, 2),
            "seconds_to_all_rows": round(elapsed, 2), "rows_per_s": round(done / elapsed),
            "drain_after_last_add_s": round(elapsed - fed, 2)}


def bench_spark(dsn: str, quick: bool, workdir: Path) -> dict[str, Any]:
    import psycopg
    from psycopg import sql

    from pack_lab.rtm_lab import build_session

    os.environ.setdefault("PYTHONPATH", str(ROOT))
    os.chdir(ROOT)
    say("part 2: Spark local[2] (starting a session)")
    spark = build_session(cores=2, shuffle_partitions=2, app_name="sink-benchmark")
    spark.sparkContext.setLogLevel("FATAL")  # stopping RTM queries logs harmless task aborts
    seconds = 8 if quick else 25
    conn = psycopg.connect(dsn, autocommit=True)
    out: dict[str, Any] = {"micro_batch": [], "real_time": []}
    try:
        per_batch = 20_000 if quick else 100_000
        for run_no, (sink, rate, trigger) in enumerate((("noop", None, None), ("postgres", None, None),
                                                        ("postgres", 50_000, "1 second"))):
            table = f"bench_rate_{run_no}"  # own table: a stopped query's last task may still flush
            reset_table(conn, table)
            label = f"rate -> {sink} ({'max' if rate is None else f'{rate:,}/s offered, 1 s trigger'})"
            say(f"  {label} for {seconds} s ...")
            result = rate_run(spark, seconds, rate, sink, dsn, table,
                              str(workdir / f"ck-rate-{sink}-{rate}"), trigger, per_batch)
            say(f"    {result['rows_per_s'] or 0:>11,} rows/s over {result['batches']} batches; "
                f"batch rows {result['batch_rows_first_half_avg']} -> {result['batch_rows_second_half_avg']}, "
                f"max batch {result['max_batch_ms']} ms")
            out["micro_batch"].append(result)
        total = 6_000 if quick else 40_000
        chunk, pause = (1_000, 0.1) if quick else (2_000, 0.2)
        for sink in ("noop", "postgres"):
            reset_table(conn, "bench_rtm")
            say(f"  real-time source -> {sink}: {total:,} rows in chunks of {chunk:,} ...")
            result = rtm_run(spark, total, chunk, pause, sink, dsn, "bench_rtm",
                             str(workdir / f"ck-rtm-{sink}"), str(workdir / "noop-counts"),
                             timeout=60 if quick else 180)
            say(f"    {result['rows_per_s']:>11,} rows/s; all rows after {result['seconds_to_all_rows']} s "
                f"(feeding took {result['feed_seconds']} s)")
            out["real_time"].append(result)
    finally:
        for q in spark.streams.active:
            q.stop()
        spark.stop()
        for table in ("bench_rate_0", "bench_rate_1", "bench_rate_2", "bench_rtm"):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        conn.close()
    mb = {r["sink"] + ("" if r["trigger"] == "as fast as possible" else "_steady"): r for r in out["micro_batch"]}
    if mb.get("noop", {}).get("rows_per_s") and mb.get("postgres", {}).get("rows_per_s"):
        out["micro_batch_sink_to_noop"] = round(mb["postgres"]["rows_per_s"] / mb["noop"]["rows_per_s"], 3)
    rt = {r["sink"]: r for r in out["real_time"]}
    if rt.get("noop", {}).get("rows_per_s"):
        out["real_time_sink_to_noop"] = round(rt["postgres"]["rows_per_s"] / rt["noop"]["rows_per_s"], 3)
    return out


# ------------------------------------------------------------- reporting --
REFERENCE = ROOT / "references" / "lakebase-sink-python.md"
#: The figures table's markers; `scripts/skills.py generate` writes the block (generator "sink-benchmark"
#: renders :func:`render_markdown` from the committed JSON).
START, END = "<!-- generated:sink-benchmark -->", "<!-- /generated:sink-benchmark -->"


def render_markdown(report: dict[str, Any]) -> str:
    """The figures table for the reference (between its sink_benchmark markers)."""
    lines = ["| writer (one connection, commit every "
             f"{report['args']['batch']:,} rows) | rows | best rows/s | × raw `COPY` (median) | "
             "× `COPY` into the keyed table (median) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in report["direct"]:
        keyed = r.get("ratio_to_keyed_copy")
        keyed_cell = f"{keyed:.2f}" if keyed is not None else "—"
        lines.append(f"| {r['name']} | {r['rows']:,} | {r['rows_per_s']:,} | {r['ratio_to_copy']:.2f} | {keyed_cell} |")
    spark = report.get("spark")
    if spark:
        lines += ["", "| Spark pipeline on `local[2]` | rows/s | notes |", "| --- | ---: | --- |"]
        for r in spark["micro_batch"]:
            what = "max" if r["offered_rows_per_s"] is None else f"{r['offered_rows_per_s']:,}/s offered, 1 s trigger"
            sink = "`noop` sink" if r["sink"] == "noop" else "sink, upsert"
            steady = r["offered_rows_per_s"] is not None
            rate = r["sustained_rows_per_s"] if steady else r["rows_per_s"]
            how = "sustained over the run" if steady else "rows ÷ batch time"
            lines.append(f"| micro-batch, {r['source'].split(' ')[0]} → {sink} ({what}) | "
                         f"{rate or 0:,} | {how}; {r['batches']} batches; rows per batch "
                         f"{r['batch_rows_first_half_avg'] or 0:,} (first half) then "
                         f"{r['batch_rows_second_half_avg'] or 0:,}; longest batch {r['max_batch_ms']} ms |")
        for r in spark["real_time"]:
            sink = "no-op `foreach`" if r["sink"] == "noop" else "sink, upsert"
            lines.append(f"| real-time, lab source → {sink} | {r['rows_per_s']:,} | {r['rows']:,} rows; all "
                         f"written {r['seconds_to_all_rows']} s after the first add "
                         f"(feeding took {r['feed_seconds']} s) |")
    lines += ["", targets_sentence(report)]
    return "\n".join(lines)


def targets_sentence(report: dict[str, Any]) -> str:
    """One paragraph: each target, the figure reached, met or not."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    by_name = {r["name"]: r for r in report["direct"]}
    append = by_name["sink append (COPY)"]["ratio_to_copy"]
    upsert = by_name["sink upsert, new keys (unnest)"]["ratio_to_copy"]
    upsert_keyed = by_name["sink upsert, new keys (unnest)"].get("ratio_to_keyed_copy")
    parts = [f"append {append:.2f}× raw `COPY` (target 0.85×, {verdict(append >= 0.85)})",
             f"upsert of new keys {upsert:.2f}× raw `COPY` into an unindexed table "
             f"(target 0.45×, {verdict(upsert >= 0.45)})"]
    if upsert_keyed is not None:
        parts.append(f"the same upsert {upsert_keyed:.2f}× a raw `COPY` into the same keyed table "
                     f"(target 0.45×, {verdict(upsert_keyed >= 0.45)})")
    spark = report.get("spark")
    if spark:
        fast = [r for r in spark["micro_batch"] if r["sink"] == "postgres" and r["offered_rows_per_s"] is None]
        steady = [r for r in spark["micro_batch"] if r["sink"] == "postgres" and r["offered_rows_per_s"]]
        if fast and fast[0]["rows_per_s"]:
            rate = fast[0]["rows_per_s"]
            parts.append(f"micro-batch upserts {rate:,} rows/s (target 50,000, {verdict(rate >= 50_000)})")
        if steady and steady[0]["batch_rows_second_half_avg"]:
            s = steady[0]
            growing = s["batch_rows_second_half_avg"] > 1.1 * s["batch_rows_first_half_avg"]
            parts.append(f"at {s['offered_rows_per_s']:,} rows/s offered the batches "
                         f"{'grew (a backlog)' if growing else 'did not grow (no backlog)'}")
        ratio = spark.get("real_time_sink_to_noop")
        if ratio is not None:
            parts.append(f"real-time mode {ratio:.2f}× its no-op ceiling (target 0.8×, {verdict(ratio >= 0.8)})")
    return "Targets in this run: " + "; ".join(parts) + "."


def update_reference() -> list[str]:
    """Rewrite the figures table wherever the pack embeds it, from the committed JSON (the shared block writer)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from skillcheck.regenerate import write_from_script

    return write_from_script("sink-benchmark")


# ------------------------------------------------------------------ main --
def targets(direct: list[dict[str, Any]], spark: dict[str, Any] | None) -> dict[str, Any]:
    by_name = {r["name"]: r for r in direct}
    found: dict[str, Any] = {
        "upsert_vs_copy (target >= 0.45)": by_name["sink upsert, new keys (unnest)"]["ratio_to_copy"],
        "upsert_vs_keyed_copy (target >= 0.45)":
            by_name["sink upsert, new keys (unnest)"]["ratio_to_keyed_copy"],
        "append_vs_copy (target >= 0.85)": by_name["sink append (COPY)"]["ratio_to_copy"],
    }
    if spark:
        fast = [r for r in spark["micro_batch"] if r["sink"] == "postgres" and r["trigger"] == "as fast as possible"]
        steady = [r for r in spark["micro_batch"] if r["sink"] == "postgres" and r["trigger"] != "as fast as possible"]
        if fast:
            found["micro_batch_upserts_per_s (target >= 50000)"] = fast[0]["rows_per_s"]
        if steady:
            s = steady[0]
            found["steady_50k_batches_rows_first_vs_second_half"] = [s["batch_rows_first_half_avg"],
                                                                     s["batch_rows_second_half_avg"]]
            found["steady_50k_max_batch_ms (< 1000 = no backlog)"] = s["max_batch_ms"]
        found["real_time_sink_to_noop (target >= 0.8)"] = spark.get("real_time_sink_to_noop")
    return found


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="rows for part 1 (default 200,000; quick 5,000)")
    parser.add_argument("--batch", type=int, default=1000, help="rows per flush/commit (default 1,000)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="rounds of part 1: best rows/s kept, ratios are medians of per-round ratios "
                             "(default 5; quick 1)")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the script, not the speed")
    parser.add_argument("--no-spark", action="store_true", help="skip part 2")
    parser.add_argument("--dsn", default=None, help="Postgres DSN (default: $PG_DSN or a throwaway server)")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT), help="where to write the JSON results")
    parser.add_argument("--note", default="2-core machine; local Postgres with default durability",
                        help="how the machine was when measured (kept in the JSON's machine.note)")
    parser.add_argument("--update-reference", action="store_true",
                        help="also rewrite the figures table in references/lakebase-sink-python.md")
    args = parser.parse_args(argv)
    rows = args.rows or (5_000 if args.quick else 200_000)

    import contextlib
    import tempfile

    from pack_lab.local_postgres import postgres_dsn

    context = contextlib.nullcontext(args.dsn) if args.dsn else postgres_dsn()
    started = time.time()
    with context as dsn, tempfile.TemporaryDirectory(prefix="sink-bench-") as workdir:
        import psycopg

        with psycopg.connect(dsn) as conn:
            server_version = conn.info.server_version
        direct = bench_direct(dsn, rows, args.batch, args.repeats or (1 if args.quick else 5))
        spark = None if args.no_spark else bench_spark(dsn, args.quick, Path(workdir))
    report = {
        "script": "benchmarks/sink_benchmark.py",
        "args": {"rows": rows, "batch": args.batch, "repeats": args.repeats or (1 if args.quick else 5),
                 "quick": args.quick, "spark": not args.no_spark},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "postgres_server_version": server_version,
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
                    "note": args.note},
        "started_unix": int(started), "seconds": round(time.time() - started, 1),
        "direct": direct, "spark": spark, "targets": targets(direct, spark),
    }
    say("\nresult                                         rows/s   x COPY  x keyed COPY")
    for r in direct:
        keyed = r.get("ratio_to_keyed_copy")
        say(f"  {r['name']:<42} {r['rows_per_s']:>10,} {r['ratio_to_copy']:>7.2f}"
            + (f" {keyed:>12.2f}" if keyed is not None else ""))
    for key, value in report["targets"].items():
        say(f"  {key}: {value}")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    say(f"wrote {output}")
    if args.update_reference:
        if output.resolve() != DEFAULT_OUTPUT.resolve():
            say(f"not updating the reference: its table is generated from {DEFAULT_OUTPUT.relative_to(ROOT)}")
        else:
            for changed in update_reference():
                say(f"updated {changed}")
    return report


if __name__ == "__main__":
    main()
