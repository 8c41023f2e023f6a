"""PostgresForeachWriter under faults: bad credentials, unreachable servers, restarts, bad rows, hostile names."""

from __future__ import annotations

import re
import socket
import threading
import time

import psycopg
import pytest
from psycopg import sql

from pack_lab.local_postgres import free_port
from rtm_lakebase.postgres.connection import ConnectionSettings
from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkConnectionError, SinkSettings
from rtm_lakebase.sink.statements import create_table_sql
from tests.sink.helpers import make_table, table_rows

pytestmark = pytest.mark.postgres


def writer(connection, table, **options):
    options.setdefault("max_dwell_ms", 0)
    return PostgresForeachWriter(connection, SinkSettings(table=table, **options))


def rows(start, stop, version=1):
    return [{"id": i, "version": version, "name": f"n{i}"} for i in range(start, stop)]


def require_password_auth(server, password: str) -> None:
    """Switch a private server from trust to scram-sha-256 for TCP logins."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(password)))
        hba = server.data_dir / "pg_hba.conf"
        text = hba.read_text()
        text = re.sub(r"^(host\S*\s.*?)\btrust\s*$", r"\1scram-sha-256", text, flags=re.MULTILINE)
        hba.write_text(text)
        conn.execute("SELECT pg_reload_conf()")


def test_wrong_password_fails_at_once_with_a_clear_message(pg_server):
    require_password_auth(pg_server, "right-password-42")
    with psycopg.connect(pg_server.dsn + " password=right-password-42", autocommit=True) as conn:
        make_table(conn, "t")
    bad = ConnectionSettings.from_dsn(pg_server.dsn, password="wrong-password-99")
    w = writer(bad, "t", max_retries=5)
    started = time.monotonic()
    with pytest.raises(SinkConnectionError) as info:
        w.open(0, 0)
    message = str(info.value)
    assert "password authentication failed" in message and "127.0.0.1" in message
    assert "wrong-password-99" not in message and "right-password-42" not in message
    assert w.metrics.retries == 0  # a credential error is not retried
    assert time.monotonic() - started < 90  # catches a hang only: well below libpq's 130 s default connect timeout
    good = ConnectionSettings.from_dsn(pg_server.dsn, password="right-password-42")
    ok = writer(good, "t")
    ok.open(0, 0)
    ok.process(rows(0, 1)[0])
    ok.close(None)


def test_refused_connection_gives_up_after_bounded_retries():
    port = free_port()  # nobody listens here
    w = writer(f"host=127.0.0.1 port={port} user=u dbname=d connect_timeout=2", "t",
               max_retries=2, backoff_initial_ms=50)
    started = time.monotonic()
    with pytest.raises(SinkConnectionError) as info:
        w.open(0, 0)
    assert f"port={port}" in str(info.value) and "after 3 attempts" in str(info.value)
    assert w.metrics.retries == 2
    assert time.monotonic() - started < 90  # catches a hang only: well below libpq's 130 s default connect timeout


def test_silent_server_hits_connect_timeout_instead_of_hanging():
    with socket.socket() as listener:  # accepts TCP but never answers the Postgres handshake
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        w = writer(f"host=127.0.0.1 port={port} user=u dbname=d connect_timeout=2", "t", max_retries=0)
        started = time.monotonic()
        with pytest.raises(SinkConnectionError, match="(?i)timeout"):
            w.open(0, 0)
        # Generous for a loaded machine, yet well below the 130 s libpq would wait without connect_timeout.
        assert time.monotonic() - started < 90


def test_postgres_restart_mid_stream_recovers_by_itself(pg_server):
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        make_table(conn, "t")
    w = writer(pg_server.dsn, "t", max_batch_rows=10, backoff_initial_ms=200)
    w.open(0, 0)
    for row in rows(0, 25):
        w.process(row)
    pg_server.stop()  # connections are cut; come back 2 s later
    restarter = threading.Thread(target=lambda: (time.sleep(2), pg_server.start()))
    restarter.start()
    try:
        for row in rows(25, 60):
            w.process(row)
        w.close(None)
    finally:
        restarter.join()
    assert w.metrics.retries >= 1 and w.metrics.reconnects >= 1
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        assert table_rows(conn, "t") == [(i, 1, f"n{i}") for i in range(60)]


def test_outage_longer_than_retries_fails_loudly_then_replay_converges(pg_server):
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        make_table(conn, "t")
    w = writer(pg_server.dsn, "t", max_batch_rows=10, max_retries=1, backoff_initial_ms=50)
    w.open(0, 7)
    for row in rows(0, 15):
        w.process(row)
    pg_server.stop()
    with pytest.raises(SinkConnectionError, match="after 2 attempts") as info:
        for row in rows(15, 40):  # raised by a later process() or by close()
            w.process(row)
        w.close(None)
    w.close(info.value)
    pg_server.start()
    # Spark replays the epoch: the same rows again, from the start.
    replay = writer(pg_server.dsn, "t", max_batch_rows=10)
    replay.open(0, 7)
    for row in rows(0, 40):
        replay.process(row)
    replay.close(None)
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        assert table_rows(conn, "t") == [(i, 1, f"n{i}") for i in range(40)]  # 0 lost, 0 duplicated


@pytest.mark.parametrize("bad, column, reason", [
    ({"id": 7, "version": 1, "name": "x" * 21}, "name", "too long"),
    ({"id": 7, "version": "seven", "name": "x"}, "version", "str value"),
    ({"id": 7, "version": 2**70, "name": "x"}, "version", "out of range"),
    ({"id": 7, "version": None, "name": "x"}, "version", "not-null"),
])
def test_bad_row_names_key_and_column_and_writes_nothing(pg_dsn, pg_conn, table_name, bad, column, reason):
    make_table(pg_conn, table_name, {"id": "bigint", "version": "bigint NOT NULL", "name": "varchar(20)"})
    w = writer(pg_dsn, table_name, max_batch_rows=5)
    w.open(0, 0)
    for row in rows(0, 5):  # one committed flush before the bad one
        w.process(row)
    batch = rows(10, 13) + [bad] + rows(13, 15)
    with pytest.raises(BadRowError) as info:
        for row in batch:
            w.process(row)
        w.close(None)
    w.close(info.value)
    error = info.value
    assert error.key == {"id": 7} and error.column == column
    assert "id=7" in str(error) and f"column {column}" in str(error) and reason in str(error)
    assert [r[0] for r in table_rows(pg_conn, table_name)] == [0, 1, 2, 3, 4]


def test_bad_row_in_append_mode_is_named_too(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "name": "varchar(3)"}, key=())
    w = writer(pg_dsn, table_name, mode="append")
    w.open(0, 0)
    for row in ({"id": 1, "name": "ok"}, {"id": 2, "name": "toolong"}):
        w.process(row)
    with pytest.raises(BadRowError, match="column name") as info:
        w.close(None)
    assert info.value.column == "name"
    assert table_rows(pg_conn, table_name) == []


def test_hostile_identifiers_cannot_inject_sql(pg_dsn, pg_conn, table_name):
    victim = table_name + "_victim"
    make_table(pg_conn, victim)
    schema = 'sch"ema; --'
    hostile = f'{table_name}"; DROP TABLE {victim}; --'
    pg_conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        columns = {"id": "bigint", 'na"me': "text", "x; DELETE FROM pg_class": "bigint"}
        pg_conn.execute(create_table_sql(hostile, columns, ("id",), schema=schema))
        w = writer(pg_dsn, hostile, schema=schema)
        w.open(0, 0)
        w.process({"id": 1, 'na"me': "quoted", "x; DELETE FROM pg_class": 5})
        w.process({"id": 1, 'na"me': "again", "x; DELETE FROM pg_class": 6})
        w.close(None)
        got = pg_conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, hostile))).fetchall()
        assert got == [(1, "again", 6)]
        assert pg_conn.execute("SELECT to_regclass(%s)", (victim,)).fetchone()[0] is not None
        # Without schema=, a hostile name is refused with the reason, before any SQL runs.
        with pytest.raises(ValueError, match="quote a name"):
            writer(pg_dsn, hostile)
    finally:
        pg_conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
