"""Lakebase connection budget: streaming sink tasks plus application pools against the compute's cap.

Every ``foreach`` sink task holds one Postgres connection for the whole (long)
batch, and every application replica holds its pool. Together they must stay
under the maximum connections of the Lakebase compute, which grows with its
capacity units (CU); with autoscaling the cap follows the maximum CU.
:func:`check_connection_budget` does the sum and raises
:class:`ConnectionBudgetExceeded` with the breakdown when it does not fit.

Caps per CU are from the Lakebase "Manage computes" page
(https://docs.databricks.com/aws/en/oltp/projects/manage-computes), for
Lakebase Autoscaling. A Lakebase Provisioned instance accepts at most 1,000
concurrent connections whatever its size (limits on "What is a database
instance?", read on its Azure copy learn.microsoft.com/zh-cn/azure/Databricks/oltp/instances/instance): pass
``provisioned=True``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Maximum connections per compute size (CU → connections), Lakebase Autoscaling.
LAKEBASE_MAX_CONNECTIONS: dict[float, int] = {
    0.5: 104,
    1: 209,
    2: 419,
    3: 629,
    4: 839,
    8: 1678,
    16: 3357,
    32: 4000,
}


#: Lakebase Provisioned: concurrent connections per database instance, at every capacity.
LAKEBASE_PROVISIONED_MAX_CONNECTIONS = 1000


class ConnectionBudgetExceeded(ValueError):
    """More connections planned than the Lakebase compute accepts."""


def max_connections(capacity_units: float, provisioned: bool = False) -> int:
    """The connection cap for a compute of ``capacity_units`` CU.

    Autoscaling: sizes between table rows get the cap of the next smaller listed
    size (a safe under-estimate); 32 CU and above are capped at 4,000.
    ``provisioned``: a Lakebase Provisioned instance, 1,000 at any size.
    """
    if provisioned:
        if not capacity_units > 0:
            raise ValueError(f"capacity_units must be positive, got {capacity_units}")
        return LAKEBASE_PROVISIONED_MAX_CONNECTIONS
    if capacity_units < min(LAKEBASE_MAX_CONNECTIONS):
        raise ValueError(f"capacity_units must be at least 0.5, got {capacity_units}")
    listed = [cu for cu in sorted(LAKEBASE_MAX_CONNECTIONS) if cu <= capacity_units]
    return LAKEBASE_MAX_CONNECTIONS[listed[-1]]


@dataclass(frozen=True)
class ConnectionBudget:
    """The planned connections and the cap they are checked against."""

    capacity_units: float
    sink_tasks: int
    app_pool_max: int
    app_replicas: int
    reserved: int
    cap: int

    @property
    def planned(self) -> int:
        return self.sink_tasks + self.app_pool_max * self.app_replicas + self.reserved

    @property
    def spare(self) -> int:
        return self.cap - self.planned

    def describe(self) -> str:
        return (f"{self.sink_tasks} sink tasks + {self.app_pool_max} pool × {self.app_replicas} "
                f"replicas + {self.reserved} reserved = {self.planned} of {self.cap} connections "
                f"({self.capacity_units:g} CU)")


# --8<-- [start:check_connection_budget]
def check_connection_budget(capacity_units: float, sink_tasks: int, app_pool_max: int = 0,
                            app_replicas: int = 1, reserved: int = 10,
                            provisioned: bool = False) -> ConnectionBudget:
    """Raise ``ConnectionBudgetExceeded`` unless every planned connection fits under the cap.

    ``sink_tasks``: tasks of the stage that runs the ``foreach`` writer (one
    connection each; under real-time mode they stay open for the whole long
    batch, and a retried task can briefly overlap its predecessor).
    ``reserved``: connections kept free for people, migrations and monitoring.
    ``provisioned``: the target is a Lakebase Provisioned instance (1,000 connections).
    """
    for name, value in (("sink_tasks", sink_tasks), ("app_pool_max", app_pool_max),
                        ("app_replicas", app_replicas), ("reserved", reserved)):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    budget = ConnectionBudget(capacity_units, sink_tasks, app_pool_max, app_replicas, reserved,
                              max_connections(capacity_units, provisioned))
    if budget.planned > budget.cap:
        raise ConnectionBudgetExceeded(
            f"connection budget exceeded: {budget.describe()}. Use fewer partitions in the stage "
            "that writes, shrink the app pools, or use a larger compute.")
    return budget
# --8<-- [end:check_connection_budget]


#: The JVM sink's per-executor pool keeps at most this many idle connections per target
#: (``rtm_lakebase/jvm/PgConnector.java``, JVM property ``rtm.jvm.sink.maxIdle``).
JVM_POOL_MAX_IDLE = 4


# --8<-- [start:sink_connections]
def sink_connections(sink_tasks: int, rerun_tasks: int = 0, jvm_executors: int = 0,
                     jvm_pool_idle: int = 1, python_idle_workers: int = 0) -> int:
    """Connections to plan for the sinks, for ``check_connection_budget(sink_tasks=...)``.

    Measured on the lab's standalone cluster (``benchmarks/soak.py``, ``pg_stat_activity``
    sampled through faults): one connection per running sink task, for both writers,
    plus the connections each keeps between tasks.
    ``rerun_tasks``: tasks that can be re-run at once after a lost executor or a failed
    flush; a re-run attempt connects before Postgres has dropped the lost attempt's
    connection, so each counts twice for a while. ``jvm_executors``: executors running
    the JVM sink; between tasks each keeps up to ``jvm_pool_idle`` idle connections
    (one per sink task slot it runs; at most :data:`JVM_POOL_MAX_IDLE`).
    ``python_idle_workers``: Python worker processes that ran a Python writer task and
    are not running one now (at most the task slots of the executors running it); each
    keeps its connection for the next task (``SinkSettings.connection_max_age_s``).
    """
    for name, value in (("sink_tasks", sink_tasks), ("rerun_tasks", rerun_tasks),
                        ("jvm_executors", jvm_executors), ("jvm_pool_idle", jvm_pool_idle),
                        ("python_idle_workers", python_idle_workers)):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    return (sink_tasks + rerun_tasks + jvm_executors * min(jvm_pool_idle, JVM_POOL_MAX_IDLE)
            + python_idle_workers)
# --8<-- [end:sink_connections]
