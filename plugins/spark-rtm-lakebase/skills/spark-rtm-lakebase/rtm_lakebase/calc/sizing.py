"""Real-time-mode sizing calculator: task slots a query needs, workers to provide them, and the Kafka maxPartitions trade-off.

Real-time mode schedules every task of every stage of a long batch at the same
time and keeps them running, so a cluster must have at least as many task
slots (executor cores) as the query has tasks across all its stages. A query
that needs more is not scheduled: in open-source Spark 4.3 a stateful query
fails with ``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT``
(verified: ``tests/test_slot_math.py``). Pure Python, no Spark import::

    shape = QueryShape(source_tasks=8, shuffle_stages=(4,))
    shape.required_slots            # 12
    plan_cluster(shape, cores_per_worker=8, target_utilisation=0.5).workers   # 3
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _utilisation(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"target_utilisation must be a number in (0, 1], got {value!r}")
    if not 0 < value <= 1:
        raise ValueError(f"target_utilisation must be in (0, 1], got {value}")
    return float(value)


# --8<-- [start:shape]
@dataclass(frozen=True)
class QueryShape:
    """The stages of an RTM query, as task counts.

    - ``source_tasks``: tasks of the source stage (Kafka: one per topic
      partition, or fewer with ``maxPartitions``; see :func:`kafka_source_tasks`).
    - ``shuffle_stages``: one entry per stage after an exchange, holding its
      partition count: ``spark.sql.shuffle.partitions`` for a stateful operator
      (aggregation, ``dropDuplicates``, ``transformWithState``), or the
      argument of a ``repartition(n)``. A stateless query has none.
    """

    source_tasks: int
    shuffle_stages: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _positive_int("source_tasks", self.source_tasks)
        if isinstance(self.shuffle_stages, (str, bytes)) or not isinstance(
                self.shuffle_stages, (tuple, list)):
            raise ValueError("shuffle_stages must be a sequence of partition counts")
        for i, n in enumerate(self.shuffle_stages):
            _positive_int(f"shuffle_stages[{i}]", n)
        object.__setattr__(self, "shuffle_stages", tuple(self.shuffle_stages))

    @property
    def required_slots(self) -> int:
        """Every task of every stage runs at once: the sum over stages."""
        return self.source_tasks + sum(self.shuffle_stages)
# --8<-- [end:shape]


def stateful_query(source_tasks: int, shuffle_partitions: int, exchanges: int = 1) -> QueryShape:
    """A query with ``exchanges`` shuffles, each into ``shuffle_partitions`` partitions."""
    _positive_int("shuffle_partitions", shuffle_partitions)
    _positive_int("exchanges", exchanges, minimum=0)
    return QueryShape(source_tasks, (shuffle_partitions,) * exchanges)


def kafka_source_tasks(topic_partitions: int, max_partitions: int | None = None) -> int:
    """Source tasks for a Kafka topic: one per partition, capped by ``maxPartitions``."""
    _positive_int("topic_partitions", topic_partitions)
    if max_partitions is None:
        return topic_partitions
    _positive_int("max_partitions", max_partitions)
    return min(topic_partitions, max_partitions)


@dataclass(frozen=True)
class KafkaOption:
    """One ``maxPartitions`` choice: how many source tasks and how many topic partitions each reads."""

    max_partitions: int | None
    source_tasks: int
    topic_partitions_per_task: int  # the busiest task's share
    required_slots: int


def kafka_tradeoff(topic_partitions: int, shuffle_stages: Sequence[int] = (),
                   choices: Sequence[int | None] = (None,)) -> list[KafkaOption]:
    """For each ``maxPartitions`` choice: source tasks, partitions per task and total slots.

    Fewer source tasks free slots (and cores) but make each task read more
    topic partitions, so each task must keep up with more traffic.
    """
    options = []
    for choice in choices:
        tasks = kafka_source_tasks(topic_partitions, choice)
        shape = QueryShape(tasks, tuple(shuffle_stages))
        options.append(KafkaOption(choice, tasks, math.ceil(topic_partitions / tasks),
                                   shape.required_slots))
    return options


# --8<-- [start:plan]
@dataclass(frozen=True)
class ClusterPlan:
    """Workers needed so the query's tasks fill at most ``target_utilisation`` of the slots."""

    required_slots: int
    cores_per_worker: int
    target_utilisation: float
    workers: int

    @property
    def total_slots(self) -> int:
        return self.workers * self.cores_per_worker

    @property
    def utilisation(self) -> float:
        """Share of the cluster's slots the query's tasks occupy."""
        return self.required_slots / self.total_slots


def plan_cluster(shape: QueryShape, cores_per_worker: int,
                 target_utilisation: float = 0.5) -> ClusterPlan:
    """Smallest worker count with ``slots >= required_slots / target_utilisation``.

    ``target_utilisation=1.0`` gives the hard minimum (no headroom).
    """
    _positive_int("cores_per_worker", cores_per_worker)
    target = _utilisation(target_utilisation)
    wanted_slots = math.ceil(shape.required_slots / target - 1e-9)
    workers = math.ceil(wanted_slots / cores_per_worker)
    return ClusterPlan(shape.required_slots, cores_per_worker, target, workers)
# --8<-- [end:plan]


@dataclass(frozen=True)
class LocalCheck:
    """Whether a ``local[N]`` session can run the query, and why."""

    local_cores: int
    required_slots: int

    @property
    def fits(self) -> bool:
        return self.local_cores >= self.required_slots

    @property
    def shortfall(self) -> int:
        return max(0, self.required_slots - self.local_cores)

    def message(self) -> str:
        if self.fits:
            return (f"local[{self.local_cores}] has {self.local_cores} slots; "
                    f"the query needs {self.required_slots}: it can be scheduled")
        return (f"local[{self.local_cores}] has {self.local_cores} slots but the query needs "
                f"{self.required_slots}: a stateful query fails with "
                "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT, a stateless one starves; "
                f"use local[{self.required_slots}] or fewer partitions")


def check_local(shape: QueryShape, local_cores: int) -> LocalCheck:
    """Compare the query's required slots with a ``local[N]`` master's N."""
    return LocalCheck(_positive_int("local_cores", local_cores), shape.required_slots)


def main() -> None:  # pragma: no cover - prints the worked examples of the reference
    shape = stateful_query(source_tasks=16, shuffle_partitions=8)
    print(f"16 Kafka partitions + groupBy into 8 shuffle partitions: {shape.required_slots} slots")
    for target in (1.0, 0.5):
        plan = plan_cluster(shape, cores_per_worker=8, target_utilisation=target)
        print(f"  target {target:.0%}: {plan.workers} workers x 8 cores = {plan.total_slots} slots "
              f"({plan.utilisation:.0%} used)")
    for option in kafka_tradeoff(16, (8,), choices=(None, 8, 4)):
        print(f"  maxPartitions={option.max_partitions}: {option.source_tasks} source tasks, "
              f"{option.topic_partitions_per_task} topic partitions each, "
              f"{option.required_slots} slots")


if __name__ == "__main__":
    main()
