"""The two-query shape (deduplicate, publish, count) is at-least-once across the hop.

On Databricks a deduplication cannot feed an aggregation in one real-time
query (one shuffle per query), so the pack recommends two queries joined by a
Kafka topic. Here the first query deduplicates into a JSON-lines "topic"; its
first long batch is then replayed as after a crash before the commit
(``pack_lab.replay.rewind_to_batch``), so it publishes the same ids again.
The second query reads everything published:

- counting naively double-counts the replayed ids;
- deduplicating again by id in the second query stays exact (open-source only:
  Databricks refuses the two shuffles);
- an idempotent Postgres sink (insert-if-absent on the id) stays exact, and
  the count is taken in SQL: the shape that also runs on Databricks.
"""

from __future__ import annotations

import pytest

from pack_lab.file_sink import JsonLinesForeachWriter, read_rows, wait_for_rows
from pack_lab.replay import rewind_to_batch, wait_for_commit

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "event_id STRING, device STRING"
# e2 and e4 arrive twice upstream; the first query removes those duplicates.
EVENTS = [("e1", "a"), ("e2", "a"), ("e2", "a"), ("e3", "b"), ("e4", "b"), ("e4", "b"), ("e5", "b")]
TRUTH = {"a": 2, "b": 3}
UNIQUE = 5


def _start(df, out, checkpoint):
    return (df.writeStream.foreach(JsonLinesForeachWriter(out)).outputMode("update")
            .trigger(realTime="5 seconds").option("checkpointLocation", str(checkpoint)).start())


def _latest_counts(rows):
    out: dict[str, int] = {}
    for r in rows:
        out[r["device"]] = max(out.get(r["device"], 0), int(r["count"]))
    return out


@pytest.fixture(scope="module")
def published(spark, tmp_path_factory):
    """What the deduplicating query published, including one replayed long batch."""
    from pack_lab.rtm_lab import RealTimeMemorySource

    tmp_path = tmp_path_factory.mktemp("hop")
    source = RealTimeMemorySource(spark, SCHEMA)
    topic, ck = tmp_path / "topic", tmp_path / "ck-dedup"
    dedup = source.dataframe().dropDuplicates(["event_id"])
    query = _start(dedup, topic, ck)
    try:
        source.add([{"event_id": e, "device": d} for e, d in EVENTS])
        wait_for_rows(topic, UNIQUE, query=query)
        wait_for_commit(query, ck, 0)
    finally:
        query.stop()
    first_run = read_rows(topic)
    assert sorted(r["event_id"] for r in first_run) == ["e1", "e2", "e3", "e4", "e5"]

    rewind_to_batch(ck, 0)  # as if the query died after publishing, before committing
    query = _start(dedup, topic, ck)
    try:
        rows = wait_for_rows(topic, 2 * UNIQUE, query=query)
        wait_for_commit(query, ck, 0)
    finally:
        query.stop()
    return read_rows(topic) if len(rows) < 2 * UNIQUE else rows


def _count_query(spark, tmp_path, name, published_rows, build, shuffle_partitions=None):
    from pack_lab.rtm_lab import RealTimeMemorySource

    if shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    source = RealTimeMemorySource(spark, SCHEMA)
    out, ck = tmp_path / name, tmp_path / f"ck-{name}"
    query = _start(build(source.dataframe()), out, ck)
    try:
        source.add(published_rows)
        wait_for_commit(query, ck, 0)  # every row was added before the first batch ended
        wait_for_rows(out, 1, query=query)
        return _latest_counts(read_rows(out))
    finally:
        query.stop()


def test_replay_republishes_every_id_of_the_batch(published):
    ids = sorted(r["event_id"] for r in published)
    assert ids == sorted(["e1", "e2", "e3", "e4", "e5"] * 2)


def test_naive_count_after_the_hop_double_counts(spark, tmp_path, published):
    counts = _count_query(spark, tmp_path, "naive", published,
                          lambda df: df.groupBy("device").count())
    assert counts == {"a": 2 * TRUTH["a"], "b": 2 * TRUTH["b"]}


def test_deduplicating_again_in_the_second_query_stays_exact(spark, tmp_path, published):
    counts = _count_query(spark, tmp_path, "dedup-again", published,
                          lambda df: df.dropDuplicates(["event_id"]).groupBy("device").count(),
                          shuffle_partitions=1)  # 1 source + 1 + 1 shuffle tasks on 4 slots
    assert counts == TRUTH


def test_insert_if_absent_downstream_stays_exact(spark, tmp_path, published, pg_dsn):
    import uuid

    import psycopg

    from pack_lab.rtm_lab import RealTimeMemorySource
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    table = f"hop_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (event_id text PRIMARY KEY, device text NOT NULL)")
    try:
        source = RealTimeMemorySource(spark, SCHEMA)
        writer = PostgresForeachWriter(pg_dsn, SinkSettings(table=table, mode="insert_ignore",
                                                            max_batch_rows=100, max_dwell_ms=50))
        ck = tmp_path / "ck-pg"
        query = (source.dataframe().writeStream.foreach(writer).outputMode("update")
                 .trigger(realTime="5 seconds").option("checkpointLocation", str(ck)).start())
        try:
            source.add(published)
            wait_for_commit(query, ck, 0)
        finally:
            query.stop()
        with psycopg.connect(pg_dsn) as conn:
            counts = dict(conn.execute(
                f"SELECT device, count(*) FROM {table} GROUP BY device").fetchall())
        assert counts == TRUTH
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
