"""Helpers shared by the sink tests: table set-up and polling Postgres."""

from __future__ import annotations

import threading
import time

import psycopg
from psycopg import sql

from rtm_lakebase.sink.statements import create_table_sql


def make_table(conn: psycopg.Connection, table: str, columns: dict[str, str] | None = None,
               key: tuple[str, ...] = ("id",), schema: str | None = None) -> None:
    columns = columns or {"id": "bigint", "version": "bigint", "name": "varchar(20)"}
    conn.execute(create_table_sql(table, columns, key, schema=schema))


def table_rows(conn: psycopg.Connection, table: str, order: str = "id", schema: str | None = None) -> list[tuple]:
    target = sql.Identifier(schema, table) if schema else sql.Identifier(table)
    query = sql.SQL("SELECT * FROM {} ORDER BY {}").format(target, sql.Identifier(order))
    return conn.execute(query).fetchall()


def wait_for_count(conn: psycopg.Connection, table: str, count: int, timeout: float = 60.0,
                   query=None) -> int:
    """Poll until ``table`` has at least ``count`` rows; fail fast if a streaming query died."""
    deadline = time.monotonic() + timeout
    stmt = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
    while True:
        found = conn.execute(stmt).fetchone()[0]
        if found >= count:
            return found
        if query is not None and not query.isActive:
            raise AssertionError(f"query stopped after {found} of {count} rows: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"only {found} of {count} rows after {timeout:.0f} s")
        time.sleep(0.2)


class CrashingWriter:
    """Wraps a writer; raises once after ``crash_after`` rows while ``marker`` exists (then deletes it).

    Simulates an executor crash in the middle of an epoch, after some flushes
    were already committed. Picklable (the marker is a file path).
    """

    def __init__(self, inner, marker: str, crash_after: int):
        self.inner = inner
        self.marker = marker
        self.crash_after = crash_after
        self.seen = 0

    def open(self, partition_id, epoch_id):
        self.seen = 0
        return self.inner.open(partition_id, epoch_id)

    def process(self, row):
        import os

        self.seen += 1
        if self.seen > self.crash_after and os.path.exists(self.marker):
            os.remove(self.marker)
            raise RuntimeError("simulated executor crash")
        self.inner.process(row)

    def close(self, error):
        self.inner.close(error)


class PidRecordingWriter:
    """Wraps a writer; writes the Python worker's process id to ``pid_file`` in ``open()``. Picklable."""

    def __init__(self, inner, pid_file: str):
        self.inner = inner
        self.pid_file = pid_file

    def open(self, partition_id, epoch_id):
        import os

        with open(self.pid_file, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        return self.inner.open(partition_id, epoch_id)

    def process(self, row):
        self.inner.process(row)

    def close(self, error):
        self.inner.close(error)


def append_line(path: str, text: str) -> None:
    """An ``on_failure`` hook for tests: append ``text`` to the file ``path`` (bind it with functools.partial)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(text.replace("\n", " ") + "\n")


class PoolRecordingWriter:
    """Wraps a writer; after each task appends its process id, epoch and the process pool's counters to ``path``.

    One task at a time runs in a Python worker, so a task's counters minus the
    ``before`` of the first task of the same process are what this query's tasks did there.

    Tells the connection-reuse tests which Python worker ran each task and what that
    worker's pool (rtm_lakebase/postgres/pool.py) has opened and reused so far.
    """

    def __init__(self, inner, path: str):
        self.inner, self.path = inner, path
        self.epoch = None

    def open(self, partition_id, epoch_id):
        from rtm_lakebase.postgres.pool import POOL

        self.epoch, self.before = epoch_id, POOL.stats()
        return self.inner.open(partition_id, epoch_id)

    def process(self, row):
        self.inner.process(row)

    def close(self, error):
        import dataclasses
        import json
        import os

        from rtm_lakebase.postgres.pool import POOL

        try:
            self.inner.close(error)
        finally:
            line = {"pid": os.getpid(), "epoch": self.epoch, "error": error is not None,
                    **dataclasses.asdict(POOL.stats()),
                    "before": dataclasses.asdict(self.before)}  # the process's counters when the task opened
            with open(self.path, "a") as out:
                out.write(json.dumps(line) + "\n")


def pool_records(path) -> list[dict]:
    import json
    from pathlib import Path

    file = Path(path)
    return [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []


#: Seconds a fail-fast test waits before calling it a hang (only a missing cancel would take this long).
HANG = 120


def close_in_thread(writer, error) -> list[BaseException]:
    """``writer.close(error)`` in a thread (either sink's writer); fails the test if it hangs; what it raised."""
    done = threading.Event()
    failure: list[BaseException] = []

    def run():
        try:
            writer.close(error)
        except BaseException as exc:  # reported to the test
            failure.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(HANG), "close(error) hung on the flush in flight"
    return failure


def wait_lock_wait(conn: psycopg.Connection, app: str) -> None:
    """Poll pg_stat_activity until a backend of ``app`` waits on a lock."""
    for _ in range(HANG * 10):
        if lock_waits(conn, app):
            return
        time.sleep(0.1)
    raise AssertionError("the writer's flush never waited on the lock")


def lock_waits(conn: psycopg.Connection, app: str) -> int:
    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event_type = 'Lock'", (app,)).fetchone()[0]
