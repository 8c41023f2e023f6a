"""The JVM sink's append mode: COPY against INSERT, rows/s through Spark, in the same run.

The JVM sink (``rtm_lakebase/jvm/PostgresForeachWriter.java``) appends each flush as one
``COPY … FROM STDIN`` (``PgCopy.java``); ``build_jvm_writer(..., append_copy=False)``
(writer option ``appendcopy=false``) makes it send the same flush as a batch of
``INSERT`` statements instead. This script writes the same rows (a ``bigint`` id, a
``bigint`` version and an 80-character text, from parquet files, ``local[2]``, one
micro-batch with ``availableNow``) into a fresh table without keys through each path,
in interleaved rounds after one warm-up round, plus the ``noop`` sink as the Spark-only ceiling. It prints
rows/s per round, the median per-round ratio COPY ÷ INSERT and, since Spark's own
work is a large share at these sizes, the ratio of the time each path took beyond the
``noop`` run of the same round; and writes JSON.

    nice -n 10 .venv/bin/python benchmarks/jvm_append_copy.py            # ~10 min on a busy 2-core machine
    .venv/bin/python benchmarks/jvm_append_copy.py --quick --out /tmp/j.json   # seconds: checks the script

Uses ``PG_DSN`` when set, otherwise a throwaway local Postgres. Needs the JVM sink's jar
(``bash scripts/setup.sh`` builds it). Exit status 2 on bad arguments or environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "jvm_append_copy.json"
PATHS = ("copy", "insert", "noop")


def say(message: str) -> None:
    print(f"[jvm-append {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def fail(message: str) -> None:
    print(f"jvm_append_copy: {message}", file=sys.stderr)
    raise SystemExit(2)


def write_input(spark, rows: int, folder: str):
    """``rows`` rows (id, version, an 80-character name) as parquet in two files; returns their schema."""
    (spark.range(rows, numPartitions=2)
     .selectExpr("id", "1L AS version", "concat('row-', lpad(CAST(id AS STRING), 12, '0'), '-', "
                 "repeat('x', 64)) AS name")
     .write.parquet(folder))
    return spark.read.parquet(folder).schema


def reference_sentence(report: dict[str, Any]) -> str:
    """The figure as references/lakebase-sink-python.md states it (a test keeps the two equal)."""
    s, settings = report["summary"], report["settings"]
    return (f"COPY {s['copy']['median_rows_per_s']:,} rows/s against INSERT {s['insert']['median_rows_per_s']:,} "
            f"rows/s (medians of {settings['rounds']} interleaved rounds of {settings['rows']:,} rows; "
            f"COPY ÷ INSERT {s['copy_over_insert_median']:.2f}, the median of the per-round ratios; "
            f"the `noop` sink {s['noop']['median_rows_per_s']:,} rows/s; counting only the time beyond the `noop` "
            f"run of the same round, INSERT took {s['sink_time_insert_over_copy_median']:.1f} times as long as COPY)")


def run_once(spark, path: str, source: str, schema, dsn: str, table: str, checkpoint: str, batchsize: int,
             rows: int) -> dict[str, Any]:
    import psycopg

    from rtm_lakebase.jvm.sink import build_jvm_writer

    stream = spark.readStream.schema(schema).parquet(source).writeStream
    if path == "noop":
        stream = stream.format("noop")
    else:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            conn.execute(f'CREATE TABLE "{table}" (id bigint, version bigint, name text)')
        writer = build_jvm_writer(spark, dsn=dsn, table=table, mode="append", max_batch_rows=batchsize,
                                  max_dwell_ms=100, append_copy=path == "copy")
        stream._jwrite = stream._jwrite.foreach(writer)
    started = time.perf_counter()
    query = stream.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"the {path} query failed: {str(query.exception()).splitlines()[0]}")
    written = rows
    if path != "noop":
        with psycopg.connect(dsn, autocommit=True) as conn:
            written = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            conn.execute(f'DROP TABLE "{table}"')
        if written != rows:
            raise RuntimeError(f"the {path} path wrote {written} of {rows} rows")
    return {"path": path, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds), "rows_written": written}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="rows per run (default 400,000; quick 20,000)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds after a warm-up (default 7; quick 1)")
    parser.add_argument("--batchsize", type=int, default=1000, help="rows per flush (the sink's default 1,000)")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the script, not the speed")
    parser.add_argument("--dsn", default=None, help="Postgres DSN (default: $PG_DSN or a throwaway server)")
    parser.add_argument("--out", default=str(DEFAULT_OUTPUT), help="where to write the JSON results")
    args = parser.parse_args(argv)
    rows = args.rows if args.rows is not None else (20_000 if args.quick else 400_000)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 7)
    if rows < 1 or rounds < 1 or args.batchsize < 1:
        fail("--rows, --rounds and --batchsize must be positive")

    from pack_lab.local_postgres import postgres_dsn
    from pack_lab.rtm_lab import build_session
    from rtm_lakebase.jvm.sink import JvmSinkUnavailable, jvm_sink_jars

    try:
        jars = jvm_sink_jars()
    except JvmSinkUnavailable as exc:
        fail(f"the JVM sink is not built: {exc}")
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.time()
    context = contextlib.nullcontext(args.dsn) if args.dsn else postgres_dsn()
    with context as dsn, tempfile.TemporaryDirectory(prefix="jvm-append-") as work:
        import psycopg

        with psycopg.connect(dsn) as conn:
            server_version = conn.info.server_version
        os.environ.setdefault("PYTHONPATH", str(ROOT))
        say("starting Spark local[2]")
        spark = build_session(cores=2, shuffle_partitions=2, app_name="jvm-append-copy", jars=jars,
                              jvm_log=str(Path(work) / "spark.log"))
        try:
            source = str(Path(work) / "input")
            schema = write_input(spark, rows, source)
            say(f"{rows:,} rows in parquet; {rounds} round(s) of {', '.join(PATHS)}")
            results: list[dict[str, Any]] = []
            for path in PATHS:  # warm-up, not counted: class loading, the JDBC driver, the JIT
                run_once(spark, path, source, schema, dsn, f"jvm_append_{path}", str(Path(work) / f"ck-w-{path}"),
                         args.batchsize, rows)
            say("warmed up")
            for r in range(rounds):
                order = PATHS if r % 2 == 0 else ("insert", "copy", "noop")  # neither path always first
                for path in order:
                    result = run_once(spark, path, source, schema, dsn, f"jvm_append_{path}",
                                      str(Path(work) / f"ck-{r}-{path}"), args.batchsize, rows)
                    result["round"] = r
                    results.append(result)
                    say(f"round {r + 1}: {path:<6} {result['rows_per_s']:>9,} rows/s ({result['seconds']} s)")
        finally:
            spark.stop()
    per_round = []
    for r in range(rounds):
        by = {x["path"]: x["rows_per_s"] for x in results if x["round"] == r}
        secs = {x["path"]: x["seconds"] for x in results if x["round"] == r}
        # the sink's own share: seconds beyond the noop sink's for the same rows in the same round
        copy_sink, insert_sink = secs["copy"] - secs["noop"], secs["insert"] - secs["noop"]
        per_round.append({"round": r, "copy_over_insert": round(by["copy"] / by["insert"], 3),
                          "copy_over_noop": round(by["copy"] / by["noop"], 3),
                          "insert_over_noop": round(by["insert"] / by["noop"], 3),
                          "copy_sink_s": round(copy_sink, 3), "insert_sink_s": round(insert_sink, 3),
                          "sink_time_insert_over_copy": round(insert_sink / copy_sink, 3) if copy_sink > 0 else None})
    summary = {path: {"median_rows_per_s": round(statistics.median(x["rows_per_s"] for x in results
                                                                   if x["path"] == path)),
                      "best_rows_per_s": max(x["rows_per_s"] for x in results if x["path"] == path)}
               for path in PATHS}
    summary["copy_over_insert_median"] = round(statistics.median(p["copy_over_insert"] for p in per_round), 2)
    sink_ratios = [p["sink_time_insert_over_copy"] for p in per_round if p["sink_time_insert_over_copy"]]
    summary["sink_time_insert_over_copy_median"] = round(statistics.median(sink_ratios), 2) if sink_ratios else None
    report = {
        "benchmark": "jvm_append_copy",
        "command": "benchmarks/jvm_append_copy.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": {"rows": rows, "rounds": rounds, "batchsize": args.batchsize, "spark": "local[2]",
                     "partitions": 2, "columns": "id bigint, version bigint, name text (80 chars)",
                     "table": "no keys, no indexes", "trigger": "availableNow (one micro-batch)"},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "postgres_server_version": server_version, "load_avg_before": load_before,
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "seconds": round(time.time() - started, 1),
        "runs": results, "per_round": per_round, "summary": summary,
    }
    print(f"{'path':<8}{'median rows/s':>15}{'best rows/s':>13}")
    for path in PATHS:
        print(f"{path:<8}{summary[path]['median_rows_per_s']:>15,}{summary[path]['best_rows_per_s']:>13,}")
    print(f"COPY / INSERT (median of per-round ratios): {summary['copy_over_insert_median']}")
    print(f"sink time beyond noop, INSERT / COPY (median): {summary['sink_time_insert_over_copy_median']}")
    print("for the reference:", reference_sentence(report))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    say(f"wrote {out}")
    return report


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        fail("interrupted")
    except RuntimeError as exc:
        fail(str(exc))
