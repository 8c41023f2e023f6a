"""The JVM sink keeps its Postgres connections per executor (rtm_lakebase/jvm/PgConnector.java).

Across micro-batches a new task reuses the connection the previous task gave back
instead of connecting again; the pool is bounded; a pooled connection that died
meanwhile is found dead before use and replaced, with no row lost.
"""

from __future__ import annotations

import re
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
                                 max_dwell_ms=20)
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


def _run_batches(spark, pg_dsn, pg_conn, table_name, checkpoint, app, max_age_s, batches, between=None,
                 watch=True):
    """Micro-batches of 10 rows each; the sink's pooled backend pids after each batch (``between(b)`` runs after)."""
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(spark, "id BIGINT, version BIGINT, name STRING", num_partitions=1)
    query = start_jvm_sink_query(source.dataframe(), dsn=f"{pg_dsn} application_name={app}", table=table_name,
                                 checkpoint_location=checkpoint, trigger={"processingTime": "0 seconds"},
                                 max_dwell_ms=20, connection_max_age_s=max_age_s)
    pids = []
    try:
        def count():
            return pg_conn.execute(f'SELECT count(*) FROM "{table_name}"').fetchone()[0]

        for batch in range(batches):
            source.add([{"id": batch * 10 + i, "version": 1, "name": "x"} for i in range(10)])
            wait_until(lambda b=batch: count() == (b + 1) * 10, query, 90, f"batch {batch}")
            if watch:
                seen = wait_until(lambda: _sink_connections(pg_conn, app), None, 30, "the sink's connection")
                pids.append(tuple(seen))
            if between is not None:
                between(batch)
        assert count() == batches * 10
    finally:
        query.stop()
    return pids


def test_a_pooled_connection_past_its_age_is_replaced_not_reused(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    import time

    app = f"jvm-age-{uuid.uuid4().hex[:6]}"
    # Batch 1 follows batch 0 at once (same connection); batch 2 comes after the 3 s limit (a new one).
    pids = _run_batches(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint, app, 3, 3,
                        between=lambda b: time.sleep(3.5) if b == 1 else None)
    assert pids[0] == pids[1], pids
    assert len(pids[2]) == 1 and pids[2] != pids[1], pids
    assert not set(pids[1]) & set(_sink_connections(pg_conn, app))  # the old session is gone, not left idle


def test_the_sweep_closes_an_idle_connection_past_its_age_with_no_task_coming(jvm_spark, pg_dsn, pg_conn,
                                                                             table_name, checkpoint):
    import time

    app = f"jvm-sweep-{uuid.uuid4().hex[:6]}"
    pool = jvm_spark.sparkContext._jvm.rtm_lakebase.jvm.PgConnector
    pids = _run_batches(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint, app, 2, 1)
    assert len(pids[0]) == 1
    pool.sweep()
    assert _sink_connections(pg_conn, app) == list(pids[0])  # young: kept idle for the next task
    time.sleep(2.5)
    pool.sweep()  # what the pool's sweeper thread does every 30 s
    wait_until(lambda: not _sink_connections(pg_conn, app), None, 10, "the aged idle session to end")


def test_age_zero_switches_reuse_off(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    app = f"jvm-noreuse-{uuid.uuid4().hex[:6]}"
    pool = jvm_spark.sparkContext._jvm.rtm_lakebase.jvm.PgConnector
    opened0, reused0 = pool.openedCount(), pool.reusedCount()
    _run_batches(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint, app, 0, 3, watch=False)
    assert pool.openedCount() - opened0 >= 3  # a new connection for each batch's task
    assert pool.reusedCount() == reused0
    wait_until(lambda: not _sink_connections(pg_conn, app), None, 10, "no session kept idle")


@pytest.mark.parametrize("bad", [-1, True, "60", 2**31])
def test_connection_max_age_must_be_seconds(jvm_spark, pg_dsn, bad):
    from rtm_lakebase.jvm import build_jvm_writer

    with pytest.raises(ValueError, match="connection_max_age_s must be a number of seconds"):
        build_jvm_writer(jvm_spark, dsn=pg_dsn, table="t", connection_max_age_s=bad)


def test_the_pool_key_is_a_keyed_hash_holding_no_secret(jvm_spark):
    pool = jvm_spark.sparkContext._jvm.rtm_lakebase.jvm.PgConnector
    url, secret = "jdbc:postgresql://127.0.0.1:5432/db", "S3cret-pw"
    key = pool.key(url, "u", secret)
    assert re.fullmatch(r"[0-9a-f]{64}", key)  # HMAC-SHA256, hex
    java_hash = 0
    for ch in secret:  # String.hashCode(), what the pool used to keep
        java_hash = (31 * java_hash + ord(ch)) & 0xFFFFFFFF
    assert secret not in key and url not in key and format(java_hash, "x") not in key
    assert key == pool.key(url, "u", secret)  # one target, one key (per JVM)
    assert len({key, pool.key(url, "u", "other"), pool.key(url, "v", secret), pool.key(url + "2", "u", secret),
                pool.key(url, "u", None)}) == 5


def test_connection_age_limits_are_spread_below_the_maximum(jvm_spark, pg_dsn, table_name, pg_conn):
    """Four connections of one query get four age limits within 10 % below connection_max_age_s."""
    from rtm_lakebase.jvm import build_jvm_writer

    make_table(pg_conn, table_name)
    pool = jvm_spark.sparkContext._jvm.rtm_lakebase.jvm.PgConnector
    pool.closeAll()
    writers = [build_jvm_writer(jvm_spark, dsn=pg_dsn, table=table_name, connection_max_age_s=1000)
               for _ in range(4)]
    for partition, writer in enumerate(writers):  # all open at once: four new connections
        assert writer.open(partition, 0)
    for writer in writers:
        writer.close(None)  # each gives its healthy connection back to the pool
    limits = sorted(pool.idleAgeLimitsMs())
    pool.closeAll()
    assert len(limits) == 4
    assert all(900_000 <= limit <= 1_000_000 for limit in limits), limits  # never longer than the maximum
    assert len(set(limits)) > 1, limits  # not all at the same moment
