"""The writer's lifecycle cannot lose rows.

process() after close() or before open(), open() twice, close() twice: a
clear SinkError or the right behaviour; no buffered row dropped without an
exception; the flusher thread never dies silently, whatever fails in it.
"""

from __future__ import annotations

import threading
import time

import pytest

from rtm_lakebase.sink import PostgresForeachWriter, SinkError, SinkSettings
from rtm_lakebase.sink.metrics import SinkMetrics
from tests.sink.helpers import make_table, table_rows

pytestmark = pytest.mark.postgres


def writer(dsn, table, **options):
    options.setdefault("max_dwell_ms", 0)
    return PostgresForeachWriter(dsn, SinkSettings(table=table, **options))


def row(i):
    return {"id": i, "version": 1, "name": f"n{i}"}


def test_process_after_close_raises_instead_of_dropping_the_row(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name)
    w.open(0, 0)
    w.process(row(1))
    w.close(None)
    with pytest.raises(SinkError, match="closed"):
        w.process(row(2))
    w.close(None)  # nothing more happens
    assert table_rows(pg_conn, table_name) == [(1, 1, "n1")]


def test_process_before_open_raises(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    with pytest.raises(SinkError, match="not open"):
        writer(pg_dsn, table_name).process(row(1))


def test_open_twice_without_close_raises_and_keeps_the_buffered_rows(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name)
    w.open(0, 0)
    for i in range(3):
        w.process(row(i))
    with pytest.raises(SinkError, match="still open"):
        w.open(0, 1)
    w.close(None)
    assert table_rows(pg_conn, table_name) == [(0, 1, "n0"), (1, 1, "n1"), (2, 1, "n2")]
    w.open(0, 1)  # after close() it opens again
    w.process(row(3))
    w.close(None)
    assert len(table_rows(pg_conn, table_name)) == 4


def test_close_twice_and_close_before_open_do_nothing(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    writer(pg_dsn, table_name).close(None)
    w = writer(pg_dsn, table_name)
    w.open(0, 0)
    w.process(row(1))
    w.close(None)
    w.close(None)
    w.close(RuntimeError("late"))
    assert table_rows(pg_conn, table_name) == [(1, 1, "n1")]
    assert w.metrics.flushes == 1


def test_unrelated_error_in_the_flusher_thread_is_raised_not_lost(pg_dsn, pg_conn, table_name, monkeypatch):
    make_table(pg_conn, table_name)
    calls = {"n": 0}
    original = SinkMetrics.record_flush

    def broken_after_first(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1:
            raise ZeroDivisionError("metrics bug")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SinkMetrics, "record_flush", broken_after_first)
    w = writer(pg_dsn, table_name, max_batch_rows=2)
    w.open(0, 0)
    with pytest.raises(ZeroDivisionError, match="metrics bug"):
        for i in range(20):
            w.process(row(i))
        w.close(None)
    w.close(RuntimeError("task failed"))
    assert not [t for t in threading.enumerate() if t.name.startswith("pg-sink-flusher") and t.is_alive()]


def test_close_with_error_while_a_flush_is_running_leaves_no_thread(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_batch_rows=50)
    w.open(0, 0)
    for i in range(120):
        w.process(row(i))
    w.close(RuntimeError("task failed"))
    assert not [t for t in threading.enumerate() if t.name.startswith("pg-sink-flusher") and t.is_alive()]
    written = len(table_rows(pg_conn, table_name))
    assert written in (0, 50, 100)  # whole flushes only


def test_a_flush_that_fails_is_logged_at_error_at_once_without_waiting_for_rows(pg_dsn, pg_conn, table_name,
                                                                                caplog):
    # Spark's Python foreach reports the error only when the long batch ends: this line is the prompt signal.
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_dwell_ms=20)
    w.open(0, 0)
    with caplog.at_level("ERROR", logger="rtm_lakebase"):
        pg_conn.execute(f'DROP TABLE "{table_name}"')  # after open() read the columns
        w.process(row(1))  # buffered; only the timer flushes it (no later row, no close())
        deadline = time.monotonic() + 60  # catches a hang only
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.02)
    assert caplog.records and caplog.records[0].levelname == "ERROR"
    assert "flush failed" in caplog.text and "does not exist" in caplog.text
    w.close(RuntimeError("task failed"))


# -- reporting a failed flush at once (rtm_lakebase/sink/interrupt.py, SinkSettings.on_failure) ----------

def _blocked_read(seconds: float = 10.0) -> bytes:
    """Block the main thread in a read, as a Python worker waits for rows; returns after ``seconds`` at most."""
    import os

    r, w = os.pipe()
    release = threading.Timer(seconds, os.write, args=(w, b"x"))  # never hang the suite
    release.start()
    try:
        return os.read(r, 1)
    finally:
        release.cancel()
        os.close(r)
        os.close(w)


def test_worker_interrupt_raises_the_flush_error_in_a_main_thread_blocked_in_a_read():
    import signal

    from rtm_lakebase.sink.interrupt import WorkerInterrupt

    before = signal.getsignal(signal.SIGINT)
    interrupt = WorkerInterrupt()
    fire = threading.Timer(0.2, interrupt.fire, args=(SinkError("flush failed for good"),))
    fire.start()
    try:
        with pytest.raises(SinkError, match="flush failed for good"):
            _blocked_read()
    finally:
        fire.cancel()
        interrupt.remove()
    assert signal.getsignal(signal.SIGINT) is before


def test_in_a_spark_task_a_failed_flush_is_raised_in_the_waiting_main_thread_and_hooked_once(
        pg_dsn, pg_conn, table_name, tmp_path, monkeypatch):
    # As in a Python worker: open() on the main thread of a task, then the thread waits for rows.
    import functools
    import signal

    import rtm_lakebase.sink.interrupt as interrupt_module
    from tests.sink.helpers import append_line

    monkeypatch.setattr(interrupt_module, "in_spark_task", lambda: True)
    make_table(pg_conn, table_name)
    seen = tmp_path / "failures.txt"
    w = writer(pg_dsn, table_name, max_dwell_ms=20, max_retries=0,
               on_failure=functools.partial(append_line, str(seen)))
    before = signal.getsignal(signal.SIGINT)
    w.open(0, 0)
    pg_conn.execute(f'DROP TABLE "{table_name}"')
    w.process(row(1))  # the timer flush fails 20 ms later; no row or close() follows
    # Without the interrupt the read ends after 60 s with a byte and no error: pytest.raises is the proof.
    with pytest.raises(SinkError, match="does not exist") as info:
        _blocked_read(60)
    w.close(info.value)  # as PySpark's foreach does with the error
    assert signal.getsignal(signal.SIGINT) is before  # the writer's handler is gone
    assert not [t for t in threading.enumerate() if t.name.startswith("pg-sink-flusher") and t.is_alive()]
    lines = seen.read_text().splitlines()
    assert len(lines) == 1 and "does not exist" in lines[0]  # once, though the flusher reports every 0.5 s


def test_outside_a_spark_task_nothing_is_installed_and_the_error_waits_for_the_next_call(pg_dsn, pg_conn, table_name):
    import signal

    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_dwell_ms=20, max_retries=0)
    before = signal.getsignal(signal.SIGINT)
    w.open(0, 0)
    assert signal.getsignal(signal.SIGINT) is before and w._interrupt is None
    pg_conn.execute(f'DROP TABLE "{table_name}"')
    w.process(row(1))
    assert _blocked_read(1.0) == b"x"  # nothing interrupts this thread
    with pytest.raises(SinkError, match="does not exist"):
        w.close(None)


def test_on_failure_must_be_callable():
    with pytest.raises(ValueError, match="on_failure must be a function"):
        SinkSettings(table="t", on_failure="page me")


def test_the_alert_example_posts_the_failed_flush_to_a_webhook_at_once(pg_dsn, pg_conn, table_name):
    import http.server
    import json

    from examples.failed_flush_alert import alerting_writer

    posted: list[dict] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    make_table(pg_conn, table_name)
    w = alerting_writer(pg_dsn, table_name, f"http://127.0.0.1:{server.server_port}/hook")
    try:
        w.open(0, 0)
        pg_conn.execute(f'DROP TABLE "{table_name}"')
        w.process(row(1))  # the timer flush fails (100 ms); retries cannot help a missing table
        deadline = time.monotonic() + 60  # hang bound
        while not posted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(posted) == 1 and "does not exist" in posted[0]["text"], posted
        assert posted[0]["text"].startswith("Lakebase sink stopped writing: ")
    finally:
        w.close(RuntimeError("task failed"))
        server.shutdown()
        server.server_close()
