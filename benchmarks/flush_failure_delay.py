"""Benchmark: how long a flush that fails for good stays hidden, at the default real-time trigger.

For each sink a real-time query (the lab's memory source, ``realTime="5 minutes"``, the default of
``start_jvm_sink_query``) writes rows into a local Postgres; once a row is in the table, the table is
dropped, one more row is added, and the script measures the time from that ``addData`` to the
query's exception (``query.exception()`` set), and says whether the exception names the cause.

- JVM sink: the flusher interrupts the task thread when a flush fails for good, so the task (and
  the query) fails within seconds, whatever the trigger.
- Python writer, fast foreach path (``rtm_lakebase.foreach.start_foreach_query``): the writer makes
  the Python worker raise the error at once (``rtm_lakebase/sink/interrupt.py``) and the JVM writer,
  seeing the worker's error, interrupts the task thread: within seconds, whatever the trigger.
- Python writer, stock ``foreach``: Spark's ``PythonForeachWriter`` keeps the Python worker's
  error until the long batch ends (its ``close()``), so the query fails at the batch end; the
  writer logs the error at ERROR at once. The delay is what is left of the long batch.

Run::

    nice -n 10 .venv/bin/python benchmarks/flush_failure_delay.py           # ~11 min (two 5-minute batches for stock foreach)
    nice -n 10 .venv/bin/python benchmarks/flush_failure_delay.py --quick   # 30 s trigger, ~1.5 min

Results go to ``benchmarks/results/flush_failure_delay.json`` (``--output`` to change it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "flush_failure_delay.json"
DEFAULT_TRIGGER = "5 minutes"
#: jvm: the JVM sink; python-fast: the Python writer on the fast foreach path; python: on stock foreach.
SINKS = ("jvm", "python-fast", "python")


def say(message: str) -> None:
    print(f"[flush-failure] {message}", flush=True)


def _wait(predicate, timeout: float, what: str, query=None) -> float:
    started = time.monotonic()
    while True:
        if predicate():
            return time.monotonic()
        if query is not None and query.exception() is not None:
            raise RuntimeError(f"query failed before {what}: {query.exception()}")
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(0.05)


def measure(spark, conn, dsn: str, sink: str, trigger: str, checkpoint_root: str) -> dict:
    from psycopg import sql

    from pack_lab.rtm_lab import RealTimeMemorySource
    from rtm_lakebase.foreach import start_foreach_query
    from rtm_lakebase.jvm import start_jvm_sink_query
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    table = f"ffd_{sink.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, name text)").format(sql.Identifier(table)))
    source = RealTimeMemorySource(spark, "id BIGINT, name STRING", num_partitions=1)
    checkpoint = f"{checkpoint_root}/{table}"
    if sink == "jvm":
        query = start_jvm_sink_query(source.dataframe(), dsn=dsn, table=table, checkpoint_location=checkpoint,
                                     trigger={"realTime": trigger}, max_dwell_ms=20, max_retries=0)
    elif sink == "python-fast":
        writer = PostgresForeachWriter(dsn, SinkSettings(table=table, max_dwell_ms=20, max_retries=0))
        query = start_foreach_query(source.dataframe(), writer, checkpoint_location=checkpoint,
                                    trigger={"realTime": trigger})
    else:
        writer = PostgresForeachWriter(dsn, SinkSettings(table=table, max_dwell_ms=20, max_retries=0))
        query = (source.dataframe().writeStream.foreach(writer).outputMode("update")
                 .option("checkpointLocation", checkpoint).trigger(realTime=trigger).start())
    count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
    try:
        started = time.monotonic()
        source.add([{"id": 1, "name": "healthy"}])
        say(f"{sink}: waiting for the first row (the Python path may hold it until the batch ends)")
        _wait(lambda: conn.execute(count).fetchone()[0] == 1, 400, "first row written", query)
        healthy_after = time.monotonic() - started
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        failed_at = time.monotonic()
        source.add([{"id": 2, "name": "cannot be written"}])
        say(f"{sink}: table dropped and a row added; waiting for the query's exception")
        _wait(lambda: query.exception() is not None, 420, "query exception")
        delay = time.monotonic() - failed_at
        message = str(query.exception())
    finally:
        query.stop()
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    # The flush's error ('relation … does not exist'), or the next batch's open() ('table … not found').
    names_cause = table in message and ("does not exist" in message or "not found" in message)
    say(f"{sink}: exception {delay:.1f} s after the failing row (first row took {healthy_after:.1f} s); "
        f"names the cause: {names_cause}")
    return {"sink": sink, "trigger": trigger, "seconds_to_exception": round(delay, 2),
            "seconds_into_batch_at_failure": round(failed_at - started, 2),
            "exception_names_cause": names_cause}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 30 s trigger instead of the default 5 minutes")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--sinks", default=",".join(SINKS), help=f"comma-separated: {', '.join(SINKS)}")
    args = parser.parse_args(argv)
    trigger = "30 seconds" if args.quick else DEFAULT_TRIGGER
    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    if not sinks or set(sinks) - set(SINKS):
        print(f"flush_failure_delay: --sinks takes {', '.join(SINKS)}, got {args.sinks!r}", file=sys.stderr)
        return 2

    import logging

    import psycopg

    from pack_lab.local_postgres import postgres_dsn
    from pack_lab.rtm_lab import build_session
    from rtm_lakebase.foreach import FastForeachUnavailable, foreach_jars
    from rtm_lakebase.jvm import JvmSinkUnavailable, jvm_sink_jars

    logging.getLogger("rtm_lakebase").setLevel(logging.CRITICAL)
    try:
        jars = jvm_sink_jars() + foreach_jars()
    except (JvmSinkUnavailable, FastForeachUnavailable) as exc:
        print(f"flush_failure_delay: {exc}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="ffd-") as tmp, postgres_dsn() as dsn, \
            psycopg.connect(dsn, autocommit=True) as conn:
        say(f"starting Spark (trigger realTime={trigger!r})")
        spark = build_session(cores=2, shuffle_partitions=1, app_name="flush-failure-delay", jars=jars,
                              jvm_log=f"{tmp}/spark.log")
        try:
            for sink in sinks:
                results.append(measure(spark, conn, dsn, sink, trigger, tmp))
        finally:
            spark.stop()
    report = {"benchmark": "flush_failure_delay", "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
              "trigger": trigger, "results": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'sink':<12} {'trigger':<12} {'failure→exception':>18} {'names cause':>12}")
    for r in results:
        print(f"{r['sink']:<12} {r['trigger']:<12} {r['seconds_to_exception']:>16.1f} s "
              f"{str(r['exception_names_cause']):>12}")
    say(f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
