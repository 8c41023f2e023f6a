"""The four sink paths on the standalone cluster: exact tables through a lost worker and a Postgres restart.

The driver runs in a subprocess (``python -m pack_lab.cluster_stream``) that feeds
numbered rows into real-time mode + JVM sink, real-time mode + Python
``foreach``, real-time mode + the fast foreach path (same Python writer) and
micro-batch + Python ``foreach`` and restarts a query that dies
from its checkpoint. This test owns the cluster and Postgres and injects the
faults: SIGKILL to the worker running the sink tasks (worker, executor and Python
workers), then a Postgres restart. Every table must end with every id exactly once.

What it also proves about real-time mode on executor loss: no query fails (the
supervisor never has to restart one from its checkpoint); the scheduler re-runs
the lost tasks as a new attempt (``task 0.1``) of the same stage on a surviving
executor, which replays that batch's rows from its start offset — harmless for
an idempotent sink.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _counts(dsn: str, tables: dict[str, str]) -> dict[str, int]:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            return {p: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for p, t in tables.items()}
    except psycopg.Error:
        return {p: -1 for p in tables}


def _sink_connections(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'rtm-cluster-%'"
                            ).fetchone()[0]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def test_sinks_stay_exact_through_a_lost_worker_and_a_postgres_restart(standalone_cluster, pg_server, tmp_path):
    cluster = standalone_cluster
    conf = cluster.session_conf()
    master = conf.pop("spark.master")
    out = tmp_path / "result.json"
    driver = subprocess.Popen(
        [sys.executable, "-m", "pack_lab.cluster_stream", "--master", master, "--conf", json.dumps(conf),
         "--dsn", pg_server.dsn, "--rate", "200", "--seconds", "60", "--drain-timeout", "150", "--out", str(out)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        tables = None
        for line in driver.stderr:
            lines.append(line)
            if '"event": "started"' in line:
                tables = json.loads(line)["tables"]
                break
        assert tables, "the driver did not start its queries:\n" + "".join(lines[-20:])
        threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True).start()

        _wait(lambda: min(_counts(pg_server.dsn, tables).values()) > 0, 120, "rows in every table")
        victim = cluster.busiest_worker(pg_server.port)
        on_victim = cluster.sockets_to(pg_server.port)[victim]
        cluster.kill_worker(victim)
        at_kill = _counts(pg_server.dsn, tables)
        _wait(lambda: all(n > at_kill[p] + 200 for p, n in _counts(pg_server.dsn, tables).items()), 150,
              "every path to write again after the worker was killed")
        cluster.start_worker(victim)

        pg_server.restart(down_seconds=3)
        driver.wait(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, "".join(lines[-30:])
    result = json.loads(out.read_text())
    print(json.dumps({k: result[k] for k in ("restarts", "events", "scheduler")}, indent=1))
    assert on_victim >= 1, "the killed worker held no sink connection: the fault missed the sink tasks"
    retried = cluster.retried_tasks()
    print("re-run task attempts:", retried)
    assert retried, "no task was re-run after its executor was lost"
    assert result["restarts"] == {"rtm_jvm": 0, "rtm_python": 0, "rtm_fast": 0, "mb_python": 0}, result["events"]
    assert result["drained"], result["paths"]
    # The driver stopped: executors exit and close their connections (the JVM sink's pool by its shutdown hook).
    _wait(lambda: _sink_connections(pg_server.dsn) == 0, 60, "the sinks' connections to close")
    for path, report in result["paths"].items():
        assert report["missing"] == 0 and report["duplicated"] == 0 and report["unexpected_ids"] == 0, (path, report)
        assert report["rows"] == result["rows_per_path"] > 10_000
