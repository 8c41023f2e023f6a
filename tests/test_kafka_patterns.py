"""Kafka patterns: each transformation runs as a real query on the in-memory RTM source.

The source rows have Kafka's column names (key, value, topic, partition,
offset, timestamp); there is no broker here, so the Kafka reader/writer
option builders are checked as plain dicts.
"""

import json

import pytest

from examples import kafka_patterns as kp
from pack_lab.file_sink import JsonLinesForeachWriter, wait_for_rows

KAFKA_DDL = ("key STRING, value STRING, topic STRING, partition INT, offset BIGINT, "
             "timestamp TIMESTAMP")


def kafka_record(offset, payment, key=None, raw=None):
    value = raw if raw is not None else json.dumps(payment)
    return {"key": key if key is not None else (payment or {}).get("account_id"),
            "value": value, "topic": "payments", "partition": 0, "offset": offset,
            "timestamp": "2026-01-01T00:00:00.000Z"}


PAYMENTS = [
    {"payment_id": "p1", "account_id": "a1", "amount": 2500.0, "currency": "EUR", "event_ms": 1},
    {"payment_id": "p2", "account_id": "a2", "amount": 10.0, "currency": "EUR", "event_ms": 2},
    {"payment_id": "p3", "account_id": "a3", "amount": 1000.0, "currency": "USD", "event_ms": 3},
    {"payment_id": "p4", "account_id": "a1", "amount": -5.0, "currency": "EUR", "event_ms": 4},
    {"payment_id": "p5", "account_id": "a2", "amount": 7.0, "currency": "euro", "event_ms": 5},
]


def records():
    rows = [kafka_record(i, p) for i, p in enumerate(PAYMENTS)]
    rows.append(kafka_record(len(rows), None, key="k-bad", raw="{not json"))
    return rows


def run_rtm(spark, tmp_path, build, rows, expected_count):
    """Start ``build(source_df)`` as an RTM query into a JSON-lines writer; return its rows."""
    from pack_lab.rtm_lab import RealTimeMemorySource

    source = RealTimeMemorySource(spark, KAFKA_DDL)
    out = tmp_path / "out"
    query = (build(source.dataframe()).writeStream.foreach(JsonLinesForeachWriter(out))
             .outputMode("update").trigger(realTime="5 seconds")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        source.add(rows)
        return wait_for_rows(out, expected_count, timeout=60, query=query)
    finally:
        query.stop()


@pytest.mark.spark
def test_large_payments_filter_project_rekey_in_rtm(spark, tmp_path):
    out = run_rtm(spark, tmp_path, kp.large_payments, records(), 2)
    assert sorted(r["key"] for r in out) == ["a1", "a3"]
    values = {json.loads(r["value"])["payment_id"]: json.loads(r["value"]) for r in out}
    assert set(values) == {"p1", "p3"}
    assert values["p1"] == PAYMENTS[0]
    assert set(out[0]) == {"key", "value"}


@pytest.mark.spark
def test_enrichment_broadcast_join_in_rtm(spark, tmp_path):
    accounts = spark.createDataFrame(
        [("a1", "gold", "DE"), ("a2", "basic", "FR")], "account_id STRING, tier STRING, country STRING")
    out = run_rtm(spark, tmp_path, lambda df: kp.enrich_with_accounts(df, accounts),
                  records()[:3], 3)
    by_id = {json.loads(r["value"])["payment_id"]: json.loads(r["value"]) for r in out}
    assert by_id["p1"]["tier"] == "gold" and by_id["p1"]["country"] == "DE"
    assert by_id["p2"]["tier"] == "basic"
    # left join: an unknown account keeps its payment, without attributes
    assert "tier" not in by_id["p3"] and by_id["p3"]["account_id"] == "a3"


@pytest.mark.spark
def test_validation_routes_dead_letters_by_topic_in_rtm(spark, tmp_path):
    build = lambda df: kp.route_by_topic(kp.validate_payments(df), "payments-ok", "payments-dlq")
    out = run_rtm(spark, tmp_path, build, records(), 6)
    good = [r for r in out if r["topic"] == "payments-ok"]
    dead = [r for r in out if r["topic"] == "payments-dlq"]
    assert sorted(json.loads(r["value"])["payment_id"] for r in good) == ["p1", "p2", "p3"]
    reasons = {json.loads(r["value"])["source_offset"]: json.loads(r["value"])["error"] for r in dead}
    assert reasons == {3: "amount must be positive", 4: "currency must be 3 capital letters",
                       5: "unparsable or missing payment_id"}
    bad = next(json.loads(r["value"]) for r in dead if json.loads(r["value"])["source_offset"] == 5)
    assert bad["raw_value"] == "{not json" and bad["source_topic"] == "payments"
    assert next(r["key"] for r in dead if "{not json" in r["value"]) == "k-bad"


@pytest.mark.spark
def test_foreach_batch_router_runs_in_micro_batch(spark, tmp_path):
    from pack_lab.rtm_lab import RealTimeMemorySource

    def folder_writer(path):
        return lambda df, batch_id: df.write.mode("append").json(str(path))

    source = RealTimeMemorySource(spark, KAFKA_DDL)
    router = kp.make_batch_router(folder_writer(tmp_path / "good"), folder_writer(tmp_path / "dead"))
    query = (source.dataframe().writeStream.foreachBatch(router)
             .trigger(processingTime="0 seconds")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        source.add(records())
        query.processAllAvailable()
    finally:
        query.stop()
    good = [json.loads(line) for p in (tmp_path / "good").glob("*.json")
            for line in p.read_text().splitlines()]
    dead = [json.loads(line) for p in (tmp_path / "dead").glob("*.json")
            for line in p.read_text().splitlines()]
    assert sorted(r["payment_id"] for r in good) == ["p1", "p2", "p3"]
    assert "error" not in good[0]
    assert sorted(r["offset"] for r in dead) == [3, 4, 5]


@pytest.mark.spark
def test_foreach_batch_is_rejected_in_real_time_mode(spark, tmp_path):
    from pack_lab.rtm_lab import RealTimeMemorySource

    source = RealTimeMemorySource(spark, KAFKA_DDL)
    router = kp.make_batch_router(lambda df, i: None, lambda df, i: None)
    writer = (source.dataframe().writeStream.foreachBatch(router).outputMode("update")
              .trigger(realTime="5 seconds").option("checkpointLocation", str(tmp_path / "ck")))
    with pytest.raises(Exception, match="OPERATOR_OR_SINK_NOT_IN_ALLOWLIST"):
        query = writer.start()
        query.stop()


@pytest.mark.spark
def test_wiring_to_kafka_needs_the_connector(spark, tmp_path):
    # The Kafka connector is not part of the pyspark wheel: without it the reader fails fast, by
    # name. The set-up puts it on the shared session; tests/test_kafka_rtm.py runs the wiring for real.
    if "spark-sql-kafka" in spark.conf.get("spark.jars", ""):
        pytest.skip("Spark's Kafka connector is on this session (tests/test_kafka_rtm.py wires it to a broker)")
    with pytest.raises(Exception, match="(?i)kafka"):
        kp.start_large_payments_to_kafka(spark, "localhost:9092", "in", "out", str(tmp_path / "ck"))


def test_source_options():
    opts = kp.kafka_source_options("b1:9092,b2:9092", "payments", max_partitions=4)
    assert opts == {"kafka.bootstrap.servers": "b1:9092,b2:9092", "subscribe": "payments",
                    "startingOffsets": "latest", "failOnDataLoss": "true", "maxPartitions": "4"}
    assert kp.kafka_source_options("b:9092", "t", real_time=False,
                                   max_offsets_per_trigger=5000)["maxOffsetsPerTrigger"] == "5000"
    with pytest.raises(ValueError, match="micro-batch read limit"):
        kp.kafka_source_options("b:9092", "t", max_offsets_per_trigger=5000)
    with pytest.raises(ValueError, match="kafka. prefix|'kafka.' prefix"):
        kp.kafka_source_options("b:9092", "t", security={"security.protocol": "SSL"})


def test_sink_and_security_options():
    assert "topic" not in kp.kafka_sink_options("b:9092", "/ck")
    assert kp.kafka_sink_options("b:9092", "/ck", topic="out")["topic"] == "out"
    sec = kp.sasl_ssl_settings("svc", 'pa"ss')
    assert sec["kafka.security.protocol"] == "SASL_SSL"
    assert 'password="pa\\"ss";' in sec["kafka.sasl.jaas.config"]
    merged = kp.kafka_sink_options("b:9092", "/ck", security=sec)
    assert merged["kafka.sasl.mechanism"] == "PLAIN"
