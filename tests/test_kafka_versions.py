"""Kafka → real-time mode → Postgres under the other PySpark lines, each on its own built connector.

Marker ``spark_versions`` (its CI group; it also starts the session's Kafka broker
and Postgres): for PySpark 4.1.4 and 4.2.1, the cached venv
(``pack_lab/spark_versions.py``) builds Spark's Kafka connector with that wheel's
``scala-compiler`` against that wheel's jars (``pack_lab/kafka_connector.py``;
4.1.3 sources for 4.1.4, 4.2.0 sources for 4.2.1), then runs
``pack_lab/kafka_version_check.py`` there: the upsert example's query from a real
topic with a 5-second real-time trigger into Postgres. The table must be exact.
"""

from __future__ import annotations

import json
import uuid

import pytest

from pack_lab import kafka_connector, kafka_version_check
from pack_lab import spark_versions as sv

pytestmark = [pytest.mark.spark_versions, pytest.mark.slow]


@pytest.mark.parametrize("version", sv.OTHER_VERSIONS)
def test_real_time_kafka_to_postgres_on_the_versions_own_connector(version, kafka_bootstrap, pg_dsn, pg_conn,
                                                                   tmp_path):
    python = sv.ensure_venv(version)
    built = kafka_connector.build(version, python)[0]
    table = f"kafka_v{version.replace('.', '')}_{uuid.uuid4().hex[:8]}"
    pg_conn.execute(f'CREATE TABLE "{table}" {kafka_version_check.TABLE_DDL}')
    out = sv.run_in_venv(version, ["-m", "pack_lab.kafka_version_check", "--bootstrap", kafka_bootstrap,
                                   "--dsn", pg_dsn, "--table", table, "--work", str(tmp_path)],
                         "the Kafka → Postgres run", timeout=600)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["spark_version"] == version
    assert result["provider_jar"].endswith("/" + built.name)  # Spark's Kafka source came from this build
    assert result["real_time_scan"] is True
    assert result["rows_read"] == len(kafka_version_check.PAYMENTS) + 1
    if version.startswith("4.1."):
        assert result["trigger_api"].startswith("JVM Trigger.RealTime")
    assert kafka_version_check.table_rows(pg_conn, table) == kafka_version_check.EXPECTED
