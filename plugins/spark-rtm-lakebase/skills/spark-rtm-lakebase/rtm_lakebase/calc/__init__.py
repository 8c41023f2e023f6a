"""Calculators, pure Python (no Spark, no Postgres): real-time-mode cluster sizing and the Lakebase connection budget.

:mod:`~rtm_lakebase.calc.sizing` (task slots, workers, the Kafka ``maxPartitions``
trade-off; ``python -m rtm_lakebase.calc.sizing`` prints a worked example) and
:mod:`~rtm_lakebase.calc.connection_budget` (sink tasks plus application pools
against the compute's connection cap).
"""

from rtm_lakebase.calc.connection_budget import (
    ConnectionBudget,
    ConnectionBudgetExceeded,
    check_connection_budget,
    max_connections,
    sink_connections,
)
from rtm_lakebase.calc.sizing import (
    ClusterPlan,
    KafkaOption,
    LocalCheck,
    QueryShape,
    check_local,
    kafka_source_tasks,
    kafka_tradeoff,
    plan_cluster,
    stateful_query,
)

__all__ = ["ClusterPlan", "ConnectionBudget", "ConnectionBudgetExceeded", "KafkaOption", "LocalCheck", "QueryShape",
           "check_connection_budget", "check_local", "kafka_source_tasks", "kafka_tradeoff", "max_connections",
           "plan_cluster", "sink_connections", "stateful_query"]
