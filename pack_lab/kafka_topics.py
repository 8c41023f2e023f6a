"""Create topics, produce records and read topics back, through the lab's small Java client.

No Python Kafka client is needed: ``pack_lab/jvm/kafka/KafkaLab.java`` (built by
``scripts/install_jars.sh`` against the ``kafka-clients`` jar of Spark's
connector, which ``pack_lab/kafka_connector.py`` builds) does the work, called through py4j inside a SparkSession that has
:func:`kafka_jars` on ``spark.jars`` (no Spark job runs, so it works while a
real-time query holds every task slot), or as a ``java`` command line without
Spark::

    topics = KafkaTopics(bootstrap, spark)          # or KafkaTopics(bootstrap) for the CLI
    topics.create("payments", partitions=2)
    topics.produce("payments", [("acct-1", '{"amount": 5}'), ...])
    records = topics.read("payments")               # [Record(partition, offset, timestamp_ms, key, value)]
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from pack_lab import kafka_connector, maven_jars

ROOT = Path(__file__).resolve().parent.parent
CLIENT_JAR = ROOT / "pack_lab" / "jvm" / "kafka" / "build" / "rtm-lab-kafka.jar"


class Record(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    key: str | None
    value: str


def kafka_jars(spark_version: str = "4.3.0") -> list[str]:
    """Spark's Kafka connector built for ``spark_version``, its dependencies and the lab's client.

    Raises :class:`~pack_lab.maven_jars.JarsUnavailable` when the set-up has not built them.
    """
    jars = [str(p) for p in kafka_connector.jars(spark_version)]
    if not CLIENT_JAR.is_file():
        raise maven_jars.JarsUnavailable(f"the lab's Kafka client {CLIENT_JAR.relative_to(ROOT)} is not built; "
                                         "run `bash scripts/setup.sh` (needs javac)")
    return jars + [str(CLIENT_JAR)]


def _check_text(field: str) -> str:
    if "\t" in field or "\n" in field:
        raise ValueError(f"record keys and values may not hold tabs or newlines: {field[:40]!r}")
    return field


def _lines(records: Iterable[tuple]) -> str:
    out = []
    for record in records:
        out.append("\t".join(_check_text("" if f is None else str(f)) for f in record))
    return "\n".join(out)


def _parse(text: str) -> list[Record]:
    records = []
    for line in text.splitlines():
        partition, offset, ts, key, value = line.split("\t", 4)
        records.append(Record(int(partition), int(offset), int(ts), key or None, value))
    return records


class KafkaTopics:
    """The lab's Kafka client for one bootstrap address (py4j with ``spark``, else ``java``)."""

    def __init__(self, bootstrap: str, spark: Any = None):
        self.bootstrap = bootstrap
        self._lab = spark._jvm.rtm.lab.KafkaLab if spark is not None else None

    def _cli(self, *args: str, stdin: str | None = None) -> str:
        from pack_lab.kafka_broker import broker_classpath, java_binary

        # Without Spark: the client next to the broker's own jars (kafka-clients, slf4j, log4j).
        if not CLIENT_JAR.is_file():
            kafka_jars()  # raises saying how to build it
        cp = os.pathsep.join((str(CLIENT_JAR), broker_classpath()))
        result = subprocess.run([java_binary(), "-Xmx128m", "-cp", cp, "rtm.lab.KafkaLab", *args],
                                input=stdin, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"KafkaLab {args[0]} failed: {result.stderr.strip()[-500:]}")
        return result.stdout

    def create(self, topic: str, partitions: int = 1) -> None:
        if self._lab is not None:
            self._lab.createTopic(self.bootstrap, topic, partitions)
        else:
            self._cli("create", self.bootstrap, topic, str(partitions))

    def produce(self, topic: str, records: Iterable[tuple[str | None, str]]) -> int:
        """Produce ``(key, value)`` records (acks=all); returns how many were acknowledged."""
        text = _lines(records)
        if self._lab is not None:
            return int(self._lab.produce(self.bootstrap, topic, text))
        return int(self._cli("produce", self.bootstrap, topic, stdin=text + "\n").strip() or 0)

    def produce_to_partitions(self, topic: str, records: Iterable[tuple[int, str | None, str]]) -> int:
        """Produce ``(partition, key, value)`` records to the given partitions (py4j only)."""
        if self._lab is None:
            raise RuntimeError("produce_to_partitions needs a SparkSession (py4j)")
        return int(self._lab.produceToPartitions(self.bootstrap, topic, _lines(records)))

    def read(self, topic: str, timeout_ms: int = 60_000) -> list[Record]:
        """Every record of ``topic`` (from the beginning to its end now), by partition and offset."""
        if self._lab is not None:
            return _parse(self._lab.consume(self.bootstrap, topic, timeout_ms))
        return _parse(self._cli("consume", self.bootstrap, topic))


def wait_for_records(topics: KafkaTopics, topic: str, count: int, query: Any = None,
                     timeout: float = 120.0) -> list[Record]:
    """Read ``topic`` until it holds at least ``count`` records; fail early when ``query`` dies.

    The timeout only catches a hang; it is not a latency assertion.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        records = topics.read(topic, timeout_ms=10_000)
        if len(records) >= count:
            return records
        if query is not None and not query.isActive:
            raise RuntimeError(f"the query died before {topic} held {count} records: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} holds {len(records)} of {count} records after {timeout:.0f} s")
        time.sleep(0.3)
