"""The JVM sink keeps its Postgres connections per executor (rtm_lakebase/jvm/PgConnector.java).

Across micro-batches a new task reuses the connection the previous task gave back
instead of connecting again; the pool is bounded; a pooled connection that died
meanwhile is found dead before use and replaced, with no row lost.
"""

from __future__ import annotations

import uuid

import pytest

from pack_lab.rtm_lab import RealTimeMemorySource
from rtm_lakebase.jvm import start_jvm_sink_query
from tests.jvm_sink.conftest import wait_until
from tests.sink.helpers import make_table

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _counters(spark):
    pool = spark.sparkContext._jvm.rtm_lakebase.jvm.PgConnector
    return pool.openedCount(), pool.reusedCount(), pool.idleCount()


def _sink_connections(conn, app: str) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall()]


def test_micro_batches_reuse_one_connection_and_replace_a_dead_one(jvm_spark, pg_dsn, pg_conn, table_name,
                                                                    checkpoint):
    spark = jvm_spark
    make_table(pg_conn, table_name)
    app = f"jvm-reuse-{uuid.uuid4().hex[:6]}"
    source = RealTimeMemorySource(spark, "id BIGINT, version BIGINT, name STRING", num_partitions=1)
    opened0, reused0, _ = _counters(spark)
    query = start_jvm_sink_query(source.dataframe(), dsn=f"{pg_dsn} application_name={app}", table=table_name,
                                 checkpoint_location=checkpoint, trigger={"processingTime": "0 seconds"},
                                 batchinterval_ms=20)
    try:
        def count():
            return pg_conn.execute(f'SELECT count(*) FROM "{table_name}"').fetchone()[0]

        for batch in range(6):
            source.add([{"id": batch * 10 + i, "version": 1, "name": "x"} for i in range(10)])
            wait_until(lambda b=batch: count() == (b + 1) * 10, query, 90, f"batch {batch}")
            if batch == 2:  # kill the pooled connection between batches: it must be replaced, not used
                wait_until(lambda: _sink_connections(pg_conn, app), query, 30, "the pooled connection")
                for pid in _sink_connections(pg_conn, app):
                    pg_conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        opened, reused, idle = _counters(spark)
        # Six batches with rows (plus empty ones): two connections opened at most (the first, and
        # the replacement of the killed one); every other task reused the pooled one.
        assert opened - opened0 <= 2, (opened - opened0, reused - reused0)
        assert reused - reused0 >= 4
        assert len(_sink_connections(pg_conn, app)) == 1  # one task at a time holds or pools one
        assert count() == 60
    finally:
        query.stop()
    _, _, idle = _counters(spark)
    pool_max = 4
    assert idle <= pool_max  # bounded (rtm.jvm.sink.maxIdle, default 4)
