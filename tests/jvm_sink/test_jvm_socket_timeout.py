"""The JVM sink's socket timeout and keepalive: a silent network path costs a reconnect, not a stuck task.

A loopback proxy (pack_lab/tcp_proxy.py) sits between the sink and Postgres;
``freeze()`` makes the open connections swallow every byte without a reset, which
is what a dropped network path looks like. Found by the cluster soak: without a
socket timeout the flusher waited in a read forever and the query stopped writing.
"""

from __future__ import annotations

import pytest

from pack_lab.rtm_lab import RealTimeMemorySource
from pack_lab.tcp_proxy import TcpProxy
from rtm_lakebase.jvm import jdbc_url, start_jvm_sink_query
from rtm_lakebase.postgres import as_connection_settings
from tests.jvm_sink.conftest import wait_until
from tests.sink.helpers import make_table

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_url_has_keepalive_and_a_socket_timeout():
    url = jdbc_url("host=db.example port=5432 dbname=app user=u password=hunter2", socket_timeout_s=7)
    assert "tcpKeepAlive=true" in url and "socketTimeout=7" in url and "hunter2" not in url
    assert "socketTimeout=60" in jdbc_url("host=db.example dbname=app user=u")  # the default
    with pytest.raises(ValueError, match="socket_timeout_s must be a positive"):
        jdbc_url("host=db.example dbname=app", socket_timeout_s=0)


def test_a_silent_connection_times_out_and_the_rows_still_land(jvm_spark, pg_dsn, pg_conn, table_name,
                                                               checkpoint):
    make_table(pg_conn, table_name)
    settings = as_connection_settings(pg_dsn)
    with TcpProxy(int(settings.port or 5432)) as proxy:
        dsn = pg_dsn.replace(f"port={settings.port}", f"port={proxy.port}")
        assert str(proxy.port) in dsn
        source = RealTimeMemorySource(jvm_spark, "id BIGINT, version BIGINT, name STRING", num_partitions=1)
        query = start_jvm_sink_query(source.dataframe(), dsn=dsn, table=table_name, checkpoint_location=checkpoint,
                                     trigger={"realTime": "5 seconds"}, max_dwell_ms=20, socket_timeout_s=3)
        try:
            def count():
                return pg_conn.execute(f'SELECT count(*) FROM "{table_name}"').fetchone()[0]

            source.add([{"id": i, "version": 1, "name": "a"} for i in range(20)])
            wait_until(lambda: count() == 20, query, 90, "the first rows")
            assert proxy.freeze() >= 1  # the sink's connection goes silent
            source.add([{"id": i, "version": 1, "name": "b"} for i in range(20, 40)])
            wait_until(lambda: count() == 40, query, 60, "the rows written after the silent connection")
        finally:
            query.stop()
