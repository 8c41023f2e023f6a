"""The demo's upstream as a real Kafka topic, a drop-in for the in-memory source.

:class:`KafkaEventSource` has the two methods the demo and the upstream
simulator use on :class:`pack_lab.rtm_lab.RealTimeMemorySource`:

- ``add(rows, partition=None)`` produces the simulator's rows as JSON records
  keyed by ``device_id`` (to ``partition`` when given, else by key), through
  the lab's Java client (``pack_lab/kafka_topics.py``), acknowledged by the
  broker before it returns;
- ``dataframe()`` is ``spark.readStream.format("kafka")`` on that topic, parsed
  back into :data:`~pack_lab.upstream_simulator.EVENT_SCHEMA_DDL`, except
  ``sent_ms``, which becomes the Kafka record's timestamp (the producer's
  clock when it sent the record): latency then runs from produce time to the
  Postgres commit, as on the seed's pipeline.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from examples.kafka_patterns import kafka_source_options
from pack_lab.kafka_topics import KafkaTopics
from pack_lab.upstream_simulator import EVENT_SCHEMA_DDL

COLUMNS = tuple(part.split()[0] for part in EVENT_SCHEMA_DDL.split(","))


class KafkaEventSource:
    """A fresh topic of ``num_partitions`` partitions on ``bootstrap`` for one demo path."""

    def __init__(self, spark: Any, bootstrap: str, num_partitions: int, topic: str | None = None):
        self.spark = spark
        self.bootstrap = bootstrap
        self.num_partitions = num_partitions
        self.topic = topic or f"rtm-demo-events-{uuid.uuid4().hex[:8]}"
        self.topics = KafkaTopics(bootstrap, spark)
        self.topics.create(self.topic, num_partitions)

    def add(self, rows: Iterable[dict], partition: int | None = None) -> None:
        rows = list(rows)
        if not rows:
            return
        if partition is None:
            self.topics.produce(self.topic, [(r["device_id"], json.dumps(r)) for r in rows])
        else:
            self.topics.produce_to_partitions(
                self.topic, [(partition % self.num_partitions, r["device_id"], json.dumps(r)) for r in rows])

    def dataframe(self) -> Any:
        from pyspark.sql import functions as F

        raw = (self.spark.readStream.format("kafka")
               .options(**kafka_source_options(self.bootstrap, self.topic, starting_offsets="earliest"))
               .load())
        event = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA_DDL)
        parsed = raw.select(event.alias("e"), F.unix_millis("timestamp").alias("produced_ms"))
        return parsed.select(*[(F.col("produced_ms") if c == "sent_ms" else F.col(f"e.{c}")).alias(c)
                               for c in COLUMNS])
