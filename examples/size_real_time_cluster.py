"""Size a real-time cluster: task slots a query needs and the workers that hold them.

    python examples/size_real_time_cluster.py --kafka-partitions 16 --shuffle-partitions 8 --cores-per-worker 8

Prints the slots the query needs (every stage runs at once in real-time
mode), the workers for a 50 % headroom target and the hard minimum.
"""

from __future__ import annotations

import argparse
import sys

from rtm_lakebase.calc import kafka_source_tasks, plan_cluster, stateful_query


def sizing_lines(kafka_partitions: int, shuffle_partitions: int, cores_per_worker: int) -> list[str]:
    """The report as lines of text (one stateful stage after the Kafka source)."""
    shape = stateful_query(kafka_source_tasks(kafka_partitions), shuffle_partitions)
    lines = [f"query needs {shape.required_slots} task slots "
             f"({kafka_partitions} source + {shuffle_partitions} shuffle)"]
    for target in (0.5, 1.0):
        plan = plan_cluster(shape, cores_per_worker, target_utilisation=target)
        lines.append(f"target {target:.0%} of slots: {plan.workers} workers x {cores_per_worker} cores "
                     f"= {plan.total_slots} slots")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-partitions", type=int, required=True)
    parser.add_argument("--shuffle-partitions", type=int, required=True)
    parser.add_argument("--cores-per-worker", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        lines = sizing_lines(args.kafka_partitions, args.shuffle_partitions, args.cores_per_worker)
    except ValueError as exc:
        print(f"size_real_time_cluster: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
