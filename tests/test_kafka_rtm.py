"""Every Kafka pattern of references/kafka-streaming.md in real-time mode against a real broker.

Apache Kafka 4.4.0 (``pack_lab/kafka_broker.py``, or ``KAFKA_BOOTSTRAP``) and
Spark's Kafka connector on the shared session's ``spark.jars``: the source is
``readStream.format("kafka")`` and the sinks are Spark's Kafka sink (or the
pack's Postgres writer), with ``.trigger(realTime=...)``. Topics are created
and read back with the lab's Java client through py4j (no Spark job, so reading
works while a real-time query holds the task slots).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from examples import kafka_patterns as kp
from pack_lab.kafka_topics import KafkaTopics, wait_for_records
from pack_lab.replay import committed_batches, rewind_to_batch, wait_for_commit
from tests.test_kafka_patterns import PAYMENTS  # the same payments the in-memory pattern tests use

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

BAD_JSON = ("k-bad", "{not json")


@pytest.fixture
def topics(spark, kafka_bootstrap):
    return KafkaTopics(kafka_bootstrap, spark)


def topic_name(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def payment_records():
    return [(p["account_id"], json.dumps(p)) for p in PAYMENTS] + [BAD_JSON]


def source(spark, bootstrap, topic, **options):
    opts = kp.kafka_source_options(bootstrap, topic, starting_offsets="earliest", **options)
    return spark.readStream.format("kafka").options(**opts).load()


def to_kafka(df, bootstrap, checkpoint, topic=None, trigger="5 seconds"):
    return (df.writeStream.format("kafka")
            .options(**kp.kafka_sink_options(bootstrap, checkpoint, topic=topic))
            .outputMode("update").trigger(realTime=trigger).start())


def test_large_payments_filter_project_rekey_into_a_kafka_sink(spark, kafka_bootstrap, topics, checkpoint):
    """Pattern 1, wired by ``start_large_payments_to_kafka`` (startingOffsets latest)."""
    src, dst = topic_name("payments"), topic_name("large")
    topics.create(src, 2)
    topics.create(dst, 1)
    # A long batch (60 s) so the rows can be seen in the sink before the batch commits.
    query = kp.start_large_payments_to_kafka(spark, kafka_bootstrap, src, dst, checkpoint,
                                             trigger="60 seconds")
    try:
        wait_for_commit(query, checkpoint, 0)  # batch 0 resolved 'latest'; batch 1 runs for 60 s
        topics.produce(src, payment_records())
        out = wait_for_records(topics, dst, 2, query=query)
        assert committed_batches(checkpoint) == [0], "rows should leave before the long batch commits"
        assert "RealTimeStreamScan" in query._jsq.streamingQuery().lastExecution().executedPlan().toString()
    finally:
        query.stop()
    assert sorted(r.key for r in out) == ["a1", "a3"]
    values = {json.loads(r.value)["payment_id"]: json.loads(r.value) for r in out}
    assert values == {"p1": PAYMENTS[0], "p3": PAYMENTS[2]}


def test_enrichment_broadcast_join_into_a_kafka_sink(spark, kafka_bootstrap, topics, checkpoint):
    src, dst = topic_name("payments"), topic_name("enriched")
    topics.create(src, 2)
    topics.create(dst, 1)
    topics.produce(src, payment_records()[:3])
    accounts = spark.createDataFrame(
        [("a1", "gold", "DE"), ("a2", "basic", "FR")], "account_id STRING, tier STRING, country STRING")
    query = to_kafka(kp.enrich_with_accounts(source(spark, kafka_bootstrap, src), accounts),
                     kafka_bootstrap, checkpoint, topic=dst)
    try:
        out = wait_for_records(topics, dst, 3, query=query)
    finally:
        query.stop()
    by_id = {json.loads(r.value)["payment_id"]: json.loads(r.value) for r in out}
    assert by_id["p1"]["tier"] == "gold" and by_id["p1"]["country"] == "DE"
    assert by_id["p2"]["tier"] == "basic"
    assert "tier" not in by_id["p3"] and by_id["p3"]["account_id"] == "a3"


def test_validation_routes_dead_letters_by_topic_in_one_query(spark, kafka_bootstrap, topics, checkpoint):
    src, good, dead = topic_name("payments"), topic_name("ok"), topic_name("dlq")
    topics.create(src, 1)  # one partition: the offsets below are the production order
    topics.create(good, 1)
    topics.create(dead, 1)
    topics.produce(src, payment_records())
    routed = kp.route_by_topic(kp.validate_payments(source(spark, kafka_bootstrap, src)), good, dead)
    query = to_kafka(routed, kafka_bootstrap, checkpoint)  # no topic option: per-row topic column
    try:
        ok = wait_for_records(topics, good, 3, query=query)
        dlq = wait_for_records(topics, dead, 3, query=query)
    finally:
        query.stop()
    assert sorted(json.loads(r.value)["payment_id"] for r in ok) == ["p1", "p2", "p3"]
    reasons = {json.loads(r.value)["source_offset"]: json.loads(r.value)["error"] for r in dlq}
    assert reasons == {3: "amount must be positive", 4: "currency must be 3 capital letters",
                       5: "unparsable or missing payment_id"}
    bad = next(json.loads(r.value) for r in dlq if json.loads(r.value)["source_offset"] == 5)
    assert bad["raw_value"] == "{not json" and bad["source_topic"] == src
    assert next(r.key for r in dlq if "{not json" in r.value) == "k-bad"


def _source_task_counts(spark, query, timeout=120.0):
    """numTasks of the running real-time stage(s) of ``query`` (the long batch holds them)."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert query.isActive, query.exception()
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        counts = sorted(s.numTasks for s in stages if s is not None)
        if counts:
            return counts
        time.sleep(0.2)
    raise TimeoutError("no active stage")


@pytest.mark.parametrize("extra", [{}, {"max_partitions": 1}], ids=["plain", "maxPartitions=1"])
def test_one_source_task_per_topic_partition_and_maxpartitions_is_not_open_source(
        spark, kafka_bootstrap, topics, checkpoint, extra):
    src, dst = topic_name("three"), topic_name("out")
    topics.create(src, 3)
    topics.create(dst, 1)
    query = to_kafka(source(spark, kafka_bootstrap, src, **extra).selectExpr("key", "value"),
                     kafka_bootstrap, checkpoint, topic=dst, trigger="30 seconds")
    try:
        counts = _source_task_counts(spark, query)
    finally:
        query.stop()
    # Open-source Spark ignores Databricks' maxPartitions: still one task per Kafka partition.
    assert counts == [3]


def test_min_partitions_is_refused_in_real_time_mode(spark, kafka_bootstrap, topics, checkpoint):
    """Apache Spark's real-time mode reads each Kafka partition with exactly one task: asking the
    source to split partitions (``minPartitions``) makes the query fail."""
    src, dst = topic_name("one"), topic_name("out")
    topics.create(src, 1)
    topics.create(dst, 1)
    df = (spark.readStream.format("kafka")
          .options(**kp.kafka_source_options(kafka_bootstrap, src, starting_offsets="earliest"))
          .option("minPartitions", "3").load())
    query = to_kafka(df.selectExpr("key", "value"), kafka_bootstrap, checkpoint, topic=dst,
                     trigger="30 seconds")
    from pyspark.errors import StreamingQueryException

    try:
        with pytest.raises(StreamingQueryException, match="minpartitions is not compatible with real time mode"):
            query.awaitTermination(120)
    finally:
        query.stop()


# --- the two-query hop: Kafka → RTM → Kafka → RTM → Postgres, with a replayed epoch ---------

EVENTS = [("e1", "a"), ("e2", "a"), ("e2", "a"), ("e3", "b"), ("e4", "b"), ("e4", "b"), ("e5", "b")]
TRUTH = {"a": 2, "b": 3}
UNIQUE = 5


def _dedup_query(spark, bootstrap, src, mid, checkpoint):
    from pyspark.sql import functions as F

    events = (source(spark, bootstrap, src)
              .select(F.get_json_object(F.col("value").cast("string"), "$.event_id").alias("event_id"),
                      F.get_json_object(F.col("value").cast("string"), "$.device").alias("device"))
              .dropDuplicates(["event_id"]))
    return to_kafka(kp.to_kafka_record(events, "event_id", ["event_id", "device"]), bootstrap,
                    checkpoint, topic=mid)


@pytest.fixture(scope="module")
def hop(spark, kafka_bootstrap, tmp_path_factory):
    """The first query's output topic, after its first long batch was replayed (as after a crash)."""
    topics = KafkaTopics(kafka_bootstrap, spark)
    src, mid = topic_name("events"), topic_name("deduped")
    topics.create(src, 1)
    topics.create(mid, 1)
    topics.produce(src, [(e, json.dumps({"event_id": e, "device": d})) for e, d in EVENTS])
    ck = str(tmp_path_factory.mktemp("hop") / "ck-dedup")
    spark.conf.set("spark.sql.shuffle.partitions", "1")  # 1 source + 1 shuffle task
    try:
        query = _dedup_query(spark, kafka_bootstrap, src, mid, ck)
        try:
            wait_for_records(topics, mid, UNIQUE, query=query)
            wait_for_commit(query, ck, 0)
        finally:
            query.stop()
        rewind_to_batch(ck, 0)  # the query died after publishing, before committing batch 0
        query = _dedup_query(spark, kafka_bootstrap, src, mid, ck)
        try:
            wait_for_records(topics, mid, 2 * UNIQUE, query=query)
            wait_for_commit(query, ck, 0)
        finally:
            query.stop()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    return topics, mid


def test_a_replayed_epoch_publishes_every_id_of_the_batch_again(hop):
    topics, mid = hop
    ids = sorted(r.key for r in topics.read(mid))
    assert ids == sorted(["e1", "e2", "e3", "e4", "e5"] * 2)


def test_after_the_hop_an_idempotent_postgres_sink_stays_exact(spark, kafka_bootstrap, hop, pg_dsn,
                                                                checkpoint, table_name):
    import psycopg
    from pyspark.sql import functions as F

    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    topics, mid = hop
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (event_id text PRIMARY KEY, device text NOT NULL)")
    writer = PostgresForeachWriter(pg_dsn, SinkSettings(table=table_name, mode="insert_ignore",
                                                        max_batch_rows=100, max_dwell_ms=50))
    rows = source(spark, kafka_bootstrap, mid).select(
        F.get_json_object(F.col("value").cast("string"), "$.event_id").alias("event_id"),
        F.get_json_object(F.col("value").cast("string"), "$.device").alias("device"))
    query = (rows.writeStream.foreach(writer).outputMode("update").trigger(realTime="5 seconds")
             .option("checkpointLocation", checkpoint).start())
    count_sql = f"SELECT device, count(*) FROM {table_name} GROUP BY device"
    try:
        deadline = time.monotonic() + 120
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            while sum(dict(conn.execute(count_sql).fetchall()).values()) < UNIQUE:
                assert query.isActive, query.exception()
                assert time.monotonic() < deadline, "the rows did not reach Postgres"
                time.sleep(0.3)
        # let the long batch that read all ten published rows commit, then look again
        batches = committed_batches(checkpoint)
        wait_for_commit(query, checkpoint, (batches[-1] + 1) if batches else 0)
    finally:
        query.stop()
    with psycopg.connect(pg_dsn) as conn:
        counts = dict(conn.execute(count_sql).fetchall())
    assert len(topics.read(mid)) == 2 * UNIQUE  # what at-least-once delivered
    naive = {d: 2 * n for d, n in TRUTH.items()}  # counting the topic's rows double-counts
    assert {d: sum(1 for r in topics.read(mid) if json.loads(r.value)["device"] == d) for d in TRUTH} == naive
    assert counts == TRUTH  # insert-if-absent on the id keeps the table exact
