"""Failures are handled by what retrying can change.

Only lost connections are retried as connection errors; a deadlock is retried
as a conflict on the same connection, and prevented in the first place by
sorting each flush by key; statement timeouts and program limits fail at once,
naming the row when one row causes them, within the flush's own time.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.postgres.connection import ConnectionSettings
from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkError, SinkSettings
from tests.sink.helpers import make_table, table_rows

pytestmark = pytest.mark.postgres


def writer(connection, table, **options):
    options.setdefault("max_dwell_ms", 0)
    return PostgresForeachWriter(connection, SinkSettings(table=table, **options))


def with_options(dsn: str, options: str) -> ConnectionSettings:
    return ConnectionSettings.from_dsn(dsn, extra={"options": options})


def test_statement_timeout_names_the_locked_row_without_retrying(pg_dsn, pg_conn, table_name):
    """A row held by another session past statement_timeout: named at once, not retried."""
    make_table(pg_conn, table_name)
    pg_conn.execute(sql.SQL("INSERT INTO {} VALUES (5, 1, 'held')").format(sql.Identifier(table_name)))
    with psycopg.connect(pg_dsn) as holder:  # not autocommit: keeps its row lock until rollback
        holder.execute(sql.SQL("SELECT * FROM {} WHERE id = 5 FOR UPDATE").format(sql.Identifier(table_name)))
        w = writer(with_options(pg_dsn, "-c statement_timeout=400"), table_name, max_retries=5)
        w.open(0, 0)
        with pytest.raises(BadRowError) as info:
            for i in range(10):
                w.process({"id": i, "version": 2, "name": f"n{i}"})
            w.close(None)
        w.close(info.value)
        holder.rollback()
    assert info.value.key == {"id": 5} and info.value.sqlstate == "57014", str(info.value)
    assert w.metrics.retries == 0 and w.metrics.conflict_retries == 0  # one flush, one search, no retry
    assert w.metrics.rows_written == 0
    assert table_rows(pg_conn, table_name) == [(5, 1, "held")]


def test_statement_timeout_of_a_slow_flush_is_a_sink_error_not_retried(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "name": "text"})
    slow = f"{table_name}_slow"
    calls = f"{table_name}_calls"  # a sequence counts the rows the trigger saw: nextval survives a rollback
    pg_conn.execute(sql.SQL("CREATE SEQUENCE {}").format(sql.Identifier(calls)))
    pg_conn.execute(sql.SQL(
        "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval({}); "
        "PERFORM pg_sleep(0.05); RETURN NEW; END $$").format(sql.Identifier(slow), sql.Literal(calls)))
    pg_conn.execute(sql.SQL("CREATE TRIGGER slow BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()")
                    .format(sql.Identifier(table_name), sql.Identifier(slow)))
    w = writer(with_options(pg_dsn, "-c statement_timeout=300"), table_name)
    w.open(0, 0)
    with pytest.raises(SinkError, match="statement timeout") as info:
        for i in range(40):  # 40 × 50 ms: only the whole flush is too slow, no single row
            w.process({"id": i, "name": "x"})
        w.close(None)
    w.close(info.value)
    assert not isinstance(info.value, BadRowError)
    assert w.metrics.retries == 0 and w.metrics.conflict_retries == 0
    # The flush stopped at its 300 ms and the search for a bad row shares that budget: far fewer rows reached
    # the trigger than the 40 of the flush plus 40 of a row-by-row search that ignored the budget.
    seen = pg_conn.execute(sql.SQL("SELECT last_value FROM {}").format(sql.Identifier(calls))).fetchone()[0]
    assert seen < 40, f"the trigger ran {seen} times"
    assert table_rows(pg_conn, table_name) == []


def test_index_row_too_big_is_a_bad_row_not_retried(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "name": "text"})
    pg_conn.execute(sql.SQL("CREATE INDEX ON {} (name)").format(sql.Identifier(table_name)))
    huge = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(4000))  # incompressible, > 8 kB
    w = writer(pg_dsn, table_name, max_retries=5)
    w.open(0, 0)
    with pytest.raises(BadRowError) as info:
        for i, name in enumerate(["a", "b", huge, "c"]):
            w.process({"id": i, "name": name})
        w.close(None)
    w.close(info.value)
    assert info.value.key == {"id": 2} and info.value.sqlstate == "54000", str(info.value)
    assert w.metrics.retries == 0 and w.metrics.conflict_retries == 0
    assert table_rows(pg_conn, table_name) == []


def _overlapping_writers(dsn, table, keys, rounds):
    """Two writers, each one flush of every key per round: one ascending, one descending."""
    errors: list[BaseException] = []
    writers = []
    for r in range(rounds):
        barrier = threading.Barrier(2)

        def task(order, r=r, barrier=barrier):
            w = writer(dsn, table, max_batch_rows=len(order) + 1, version_column="version")
            writers.append(w)
            w.open(0, r)
            for k in order:
                w.process({"id": k, "version": r + 1, "name": f"r{r}"})
            barrier.wait()  # both flushes start together
            try:
                w.close(None)
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=task, args=(list(range(keys)),)),
                   threading.Thread(target=task, args=(list(range(keys))[::-1],))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return writers, errors


def test_overlapping_keys_in_opposite_orders_do_not_deadlock(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    pg_conn.execute(sql.SQL("INSERT INTO {} SELECT g, 0, 'start' FROM generate_series(0, 2999) g")
                    .format(sql.Identifier(table_name)))
    writers, errors = _overlapping_writers(pg_dsn, table_name, keys=3000, rounds=4)
    assert errors == []
    conflicts = [(w.metrics.retries, getattr(w.metrics, "conflict_retries", None)) for w in writers]
    assert conflicts == [(0, 0)] * len(writers), "a deadlock happened and was retried"
    assert table_rows(pg_conn, table_name) == [(k, 4, "r3") for k in range(3000)]


def test_deadlock_is_retried_as_a_conflict_on_the_same_connection(pg_server):
    """Another session makes a real deadlock; the writer (shorter deadlock_timeout) is the victim."""
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        make_table(conn, "t")
        conn.execute("INSERT INTO t VALUES (1, 0, 'a'), (5, 0, 'b')")
    other = psycopg.connect(pg_server.dsn)
    other.execute("SET deadlock_timeout = '10s'")
    other.execute("UPDATE t SET name = 'other' WHERE id = 5")  # holds key 5
    w = writer(with_options(pg_server.dsn, "-c deadlock_timeout=600"), "t", backoff_initial_ms=200)
    w.open(0, 0)
    w.process({"id": 1, "version": 1, "name": "writer"})
    w.process({"id": 5, "version": 1, "name": "writer"})

    def other_takes_key_1():
        time.sleep(0.3)  # the writer holds key 1 and waits for key 5 by now
        other.execute("UPDATE t SET name = 'other' WHERE id = 1")  # waits for the writer: a cycle
        other.commit()

    thread = threading.Thread(target=other_takes_key_1)
    thread.start()
    try:
        w.close(None)  # the flush fails with a deadlock, is retried, and goes through
    finally:
        thread.join()
        other.close()
    assert w.metrics.conflict_retries == 1 and w.metrics.reconnects == 0 and w.metrics.retries == 0
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        assert table_rows(conn, "t") == [(1, 1, "writer"), (5, 1, "writer")]


def test_permanent_error_fails_at_once(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_retries=5)
    w.open(0, 0)
    w.process({"id": 1, "version": 1, "name": "a"})
    pg_conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table_name)))
    with pytest.raises(SinkError, match="not retried") as info:
        w.close(None)
    assert not isinstance(info.value, BadRowError)
    assert w.metrics.retries == 0 and w.metrics.conflict_retries == 0 and w.metrics.reconnects == 0
