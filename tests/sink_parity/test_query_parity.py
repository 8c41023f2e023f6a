"""Parity through a running real-time query: one query per engine, three scenarios in a row.

The Python writer runs on the fast foreach path, the JVM sink as it is attached
in production (``start_jvm_sink_query``). Each query writes five rows, has its
Postgres session killed and writes five more (a reconnect, every row there),
then meets a value too long for its column: both queries must fail naming the
same key, column and SQLSTATE, with nothing of the failed flush in the table.
"""

from __future__ import annotations

import uuid

import pytest
from psycopg import sql

from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
from rtm_lakebase.foreach import start_foreach_query
from rtm_lakebase.jvm.sink import start_jvm_sink_query
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
from tests.jvm_sink.conftest import message_facts, query_error, wait_until
from tests.sink.helpers import make_table, table_rows

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]
SCHEMA = "id BIGINT, version BIGINT, name STRING"


def start(engine: str, df, dsn: str, table: str, checkpoint: str):
    trigger = {"realTime": MIN_REAL_TIME_TRIGGER}
    if engine == "python":
        writer = PostgresForeachWriter(dsn, SinkSettings(table=table, max_dwell_ms=20))
        return start_foreach_query(df, writer, checkpoint_location=checkpoint, trigger=trigger)
    return start_jvm_sink_query(df, dsn=dsn, table=table, checkpoint_location=checkpoint, trigger=trigger,
                                max_dwell_ms=20)


@pytest.mark.parametrize("engine", ["python", "jvm"])
def test_a_real_time_query_reconnects_then_names_the_bad_row_alike(engine, request, pg_dsn, pg_conn, table_name,
                                                                   checkpoint):
    spark = request.getfixturevalue("fast_spark" if engine == "python" else "jvm_spark")
    make_table(pg_conn, table_name)
    app = f"qpar-{uuid.uuid4().hex[:8]}"
    source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
    query = start(engine, source.dataframe(), f"{pg_dsn} application_name={app}", table_name, checkpoint)
    try:
        source.add([{"id": i, "version": 1, "name": f"n{i}"} for i in range(1, 6)])
        wait_until(lambda: len(table_rows(pg_conn, table_name)) == 5, query, 120, "the first rows")
        killed = pg_conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE application_name = %s", (app,)).fetchone()[0]
        assert killed >= 1
        source.add([{"id": i, "version": 1, "name": f"n{i}"} for i in range(6, 11)])
        wait_until(lambda: len(table_rows(pg_conn, table_name)) == 10, query, 120, "the rows after the kill")
        source.add([{"id": 11, "version": 1, "name": "x" * 30}])  # varchar(20)
        message = query_error(query)
    finally:
        query.stop()
    assert message_facts(message) == {"key": "id=11", "column": "name", "sqlstate": "22001"}, message[:2000]
    ids = [r[0] for r in pg_conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(
        sql.Identifier(table_name))).fetchall()]
    assert ids == list(range(1, 11))
