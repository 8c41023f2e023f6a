"""The runnable examples in examples/: imported, run as a user runs them, and checked by what they produce.

- ``kafka_to_lakebase_upsert``: its query logic (``payments_for_upsert``) and
  writer run as a real-time query on the lab's in-memory source with Kafka's
  columns, into a real Postgres table; replays and older events must not win,
  a record that is not JSON must not reach the table.
- Both command lines fail with one clear line (no traceback) on bad input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from examples import kafka_to_lakebase_upsert as upsert_example
from examples.size_real_time_cluster import sizing_lines

REPO = Path(__file__).resolve().parents[1]
KAFKA_DDL = "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"


def record(offset: int, value: str, key: str = "k") -> dict:
    return {"key": key, "value": value, "topic": "payments", "partition": 0, "offset": offset,
            "timestamp": "2026-01-01T00:00:00.000Z"}


def payment(pid: str, amount: float, event_ms: int) -> str:
    return json.dumps({"payment_id": pid, "account_id": "a-" + pid, "amount": amount,
                       "currency": "EUR", "event_ms": event_ms})


def table_rows(conn, table: str) -> dict:
    rows = conn.execute(f'SELECT payment_id, amount, event_ms FROM "{table}"').fetchall()
    return {pid: (amount, ms) for pid, amount, ms in rows}


@pytest.mark.spark
@pytest.mark.postgres
def test_upsert_example_fills_the_table_in_real_time_mode(spark, pg_dsn, pg_conn, table_name, checkpoint):
    from pack_lab.rtm_lab import RealTimeMemorySource

    pg_conn.execute(f'CREATE TABLE "{table_name}" (payment_id text PRIMARY KEY, account_id text, '
                    'amount double precision, currency text, event_ms bigint)')
    source = RealTimeMemorySource(spark, KAFKA_DDL)
    query = (upsert_example.payments_for_upsert(source.dataframe()).writeStream
             .foreach(upsert_example.payments_writer(pg_dsn, table_name))
             .outputMode("update").option("checkpointLocation", checkpoint)
             .trigger(realTime="5 seconds").start())
    expected = {"p1": (30.0, 3), "p2": (20.0, 2), "p3": (5.0, 9)}
    try:
        source.add([record(0, payment("p1", 10.0, 1)), record(1, payment("p2", 20.0, 2)),
                    record(2, payment("p1", 30.0, 3)), record(3, "{not json"),
                    record(4, payment("p3", 5.0, 9)),
                    record(5, payment("p1", 99.0, 2))])  # older than the stored event 3: must not win
        deadline = time.monotonic() + 90
        while sum(p["numInputRows"] for p in query.recentProgress) < 6 or table_rows(pg_conn, table_name) != expected:
            assert query.isActive, f"query stopped: {query.exception()}"
            assert time.monotonic() < deadline, f"table: {table_rows(pg_conn, table_name)}"
            time.sleep(0.3)
    finally:
        query.stop()
    assert table_rows(pg_conn, table_name) == expected


def run_example(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "examples" / name), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, cwd=REPO)


def test_sizing_example_prints_the_plan():
    proc = run_example("size_real_time_cluster.py", "--kafka-partitions", "16", "--shuffle-partitions", "8",
                       "--cores-per-worker", "8")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == sizing_lines(16, 8, 8)
    assert proc.stdout.splitlines()[0] == "query needs 24 task slots (16 source + 8 shuffle)"
    assert "3 workers x 8 cores = 24 slots" in proc.stdout  # the hard minimum: 24 / 8


@pytest.mark.parametrize("name, args, env, needle", [
    ("size_real_time_cluster.py", ["--kafka-partitions", "0", "--shuffle-partitions", "8",
                                   "--cores-per-worker", "8"], {}, "at least 1"),
    ("kafka_to_lakebase_upsert.py", ["--bootstrap-servers", "b:9092", "--topic", "t", "--checkpoint", "/tmp/c"],
     {"PG_DSN": ""}, "set PG_DSN"),
])
def test_example_commands_fail_with_one_clear_line(name, args, env, needle):
    proc = run_example(name, *args, env=env)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr, proc.stderr
