"""One real-time Kafka → Postgres query under the PySpark this interpreter has, on its built connector.

Run by ``tests/test_kafka_versions.py`` inside a version's cached venv
(``pack_lab/spark_versions.py``), against the test session's broker and Postgres::

    python -m pack_lab.kafka_version_check --bootstrap HOST:PORT --dsn DSN --table T --work DIR

It creates a topic, produces payments (a newer and an older event for one id,
and a record that is not JSON), runs ``examples/kafka_to_lakebase_upsert.py``'s
query logic and writer from Kafka (``startingOffsets`` earliest) with a 5-second
real-time trigger, waits until the table holds what the upsert must leave, stops,
and prints one JSON line: the PySpark version, the trigger API used, the jar
Spark loaded ``KafkaSourceProvider`` from and the rows read. The caller checks
the table itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

#: (key, value) records and the table the upsert must leave (newest event_ms wins; bad JSON dropped).
PAYMENTS = [
    ("a1", {"payment_id": "p1", "account_id": "a1", "amount": 10.0, "currency": "EUR", "event_ms": 1}),
    ("a2", {"payment_id": "p2", "account_id": "a2", "amount": 20.0, "currency": "EUR", "event_ms": 2}),
    ("a1", {"payment_id": "p1", "account_id": "a1", "amount": 30.0, "currency": "EUR", "event_ms": 3}),
    ("a3", {"payment_id": "p3", "account_id": "a3", "amount": 5.0, "currency": "USD", "event_ms": 9}),
    ("a1", {"payment_id": "p1", "account_id": "a1", "amount": 99.0, "currency": "EUR", "event_ms": 2}),
]
BAD_RECORD = ("k-bad", "{not json")
EXPECTED = {"p1": (30.0, 3), "p2": (20.0, 2), "p3": (5.0, 9)}
TABLE_DDL = ("(payment_id text PRIMARY KEY, account_id text, amount double precision, "
             "currency text, event_ms bigint)")


def records() -> list[tuple[str, str]]:
    return [(key, json.dumps(value)) for key, value in PAYMENTS] + [BAD_RECORD]


def table_rows(conn, table: str) -> dict:
    from psycopg import sql

    query = sql.SQL("SELECT payment_id, amount, event_ms FROM {}").format(sql.Identifier(table))
    rows = conn.execute(query).fetchall()
    return {pid: (amount, ms) for pid, amount, ms in rows}


def provider_jar(spark) -> str:
    """Where the JVM loaded Spark's Kafka source from (proves which connector ran)."""
    jvm = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    cls = jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.KafkaSourceProvider", True, loader)
    return str(cls.getProtectionDomain().getCodeSource().getLocation().getPath())


def run(bootstrap: str, dsn: str, table: str, work: Path, timeout: float) -> dict:
    import psycopg
    import pyspark

    from examples import kafka_to_lakebase_upsert as upsert
    from examples.kafka_patterns import kafka_source_options
    from pack_lab.kafka_topics import KafkaTopics, kafka_jars
    from pack_lab.rtm_lab import build_session
    from pack_lab.support_matrix import install_version_shims

    used = install_version_shims()  # PySpark 4.1 has no realTime= keyword: the JVM trigger instead
    spark = build_session(cores=2, shuffle_partitions=1, jars=kafka_jars(pyspark.__version__))
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    topics = KafkaTopics(bootstrap, spark)
    topics.create(topic, 2)
    topics.produce(topic, records())
    kafka = (spark.readStream.format("kafka")
             .options(**kafka_source_options(bootstrap, topic, starting_offsets="earliest")).load())
    query = (upsert.payments_for_upsert(kafka).writeStream.foreach(upsert.payments_writer(dsn, table))
             .outputMode("update").option("checkpointLocation", str(work / "checkpoint"))
             .trigger(realTime="5 seconds").start())
    deadline = time.monotonic() + timeout
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while sum(p["numInputRows"] for p in query.recentProgress) < len(PAYMENTS) + 1 \
                    or table_rows(conn, table) != EXPECTED:
                if not query.isActive:
                    raise RuntimeError(f"the query stopped: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no exact table within {timeout:.0f} s: {table_rows(conn, table)}")
                time.sleep(0.5)
        plan = query._jsq.streamingQuery().lastExecution().executedPlan().toString()
        rows_read = sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        query.stop()
    return {"spark_version": pyspark.__version__, "trigger_api": used["trigger_api"],
            "provider_jar": provider_jar(spark), "rows_read": rows_read,
            "real_time_scan": "RealTimeStreamScan" in plan}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    try:
        result = run(args.bootstrap, args.dsn, args.table, args.work, args.timeout)
    except Exception as exc:  # one line for the parent; the JVM's log went to stderr already
        print(f"kafka_version_check: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
