"""Per-row latency probe: timestamps at the source, inside the JVM plan and at the foreach sink.

Open-source Spark reports no latency figures for real-time mode (the
``rtmMetrics`` block of the progress report exists on Databricks only), so
this module measures latency itself, row by row, at three points:

1. **source** - the producer stamps ``source_ms`` (wall clock, ms) into each
   row when it hands the row over (:func:`stamp_rows`);
2. **plan** - :func:`with_plan_time` adds ``plan_ms``, a JVM expression
   (``reflect('java.lang.System', 'currentTimeMillis')``) evaluated per row
   inside the query; it is allowed in real-time mode, unlike a Python UDF;
3. **sink** - :class:`LatencyRecordingWriter`, a ``foreach`` writer, stamps
   ``time.time()`` in ``process()`` and appends ``source,plan,sink`` to one
   CSV file per task in a folder.

:func:`latency_report` turns the samples into p50/p90/p95/p99/max for
source→plan (engine), plan→sink (the sink path) and source→sink (end to end).
Percentiles use the nearest-rank method (:func:`percentile`).

All three clocks are the same machine's wall clock here; across machines the
differences include clock skew.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtm_lakebase.sink.metrics import nearest_rank

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame

SOURCE_COLUMN = "source_ms"
PLAN_COLUMN = "plan_ms"

#: Percentiles reported for every leg.
PERCENTILES = (50, 90, 95, 99)

#: Legs of the path, as (name, start index, end index) into a (source, plan, sink) sample.
LEGS = (("source_to_plan", 0, 1), ("plan_to_sink", 1, 2), ("source_to_sink", 0, 2))

#: The per-row JVM clock. ``reflect`` is non-deterministic, so Spark evaluates it
#: for every row instead of folding it to one constant per batch.
PLAN_CLOCK_SQL = "CAST(reflect('java.lang.System', 'currentTimeMillis') AS BIGINT)"


def now_ms() -> int:
    """Wall clock in whole milliseconds (the unit of every probe column)."""
    return int(time.time() * 1000)


def stamp_rows(rows: Iterable[Mapping[str, Any]], column: str = SOURCE_COLUMN) -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``column`` set to the current wall clock (ms), one stamp for the call."""
    stamp = now_ms()
    return [{**row, column: stamp} for row in rows]


# --8<-- [start:plan_time]
def with_plan_time(df: DataFrame, column: str = PLAN_COLUMN) -> DataFrame:
    """Add the JVM wall clock (ms) as ``column``, evaluated per row inside the query."""
    from pyspark.sql import functions as F

    return df.withColumn(column, F.expr(PLAN_CLOCK_SQL))
# --8<-- [end:plan_time]


class LatencyRecordingWriter:
    """Picklable ``foreach`` writer recording ``(source_ms, plan_ms, sink_ms)`` per row.

    Each task appends to its own file ``lat-<partition>-<epoch>-<uuid>.csv``
    under ``folder`` and flushes after every row, so samples can be read
    while a real-time long batch is still running. Rows without a source or
    plan stamp are recorded with an empty field and skipped by the report.
    """

    def __init__(self, folder: str | os.PathLike, source_column: str = SOURCE_COLUMN,
                 plan_column: str = PLAN_COLUMN):
        self.folder = str(folder)
        self.source_column = source_column
        self.plan_column = plan_column
        self._file = None

    def open(self, partition_id: int, epoch_id: int) -> bool:
        Path(self.folder).mkdir(parents=True, exist_ok=True)
        name = f"lat-{partition_id}-{epoch_id}-{uuid.uuid4().hex[:8]}.csv"
        self._file = open(os.path.join(self.folder, name), "a", encoding="ascii")
        return True

    def process(self, row: Any) -> None:
        sink = now_ms()
        source = row[self.source_column]
        plan = row[self.plan_column]
        self._file.write(f"{'' if source is None else int(source)},"
                         f"{'' if plan is None else int(plan)},{sink}\n")
        self._file.flush()

    def close(self, error: BaseException | None) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_samples(folder: str | os.PathLike) -> list[tuple[int, int, int]]:
    """Complete ``(source_ms, plan_ms, sink_ms)`` samples recorded under ``folder`` so far."""
    samples: list[tuple[int, int, int]] = []
    base = Path(folder)
    if not base.exists():
        return samples
    for path in sorted(base.glob("lat-*.csv")):
        for line in path.read_text(encoding="ascii").splitlines():
            parts = line.split(",")
            if len(parts) != 3 or not all(parts):
                continue  # a row without stamps, or a line still being written
            try:
                samples.append((int(parts[0]), int(parts[1]), int(parts[2])))
            except ValueError:
                continue
    return samples


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``q`` % of values at or below it."""
    return nearest_rank(values, q)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """``count``, ``min``, ``p50``…``p99`` and ``max`` of ``values`` (nearest rank)."""
    if not values:
        return {"count": 0}
    summary: dict[str, float] = {"count": len(values), "min": min(values)}
    for q in PERCENTILES:
        summary[f"p{q}"] = percentile(values, q)
    summary["max"] = max(values)
    return summary


def latency_report(samples: Iterable[Sequence[int]]) -> dict[str, Any]:
    """Per-leg latency summaries (ms) of ``(source, plan, sink)`` samples."""
    rows = [tuple(sample) for sample in samples]
    report: dict[str, Any] = {"count": len(rows)}
    for name, start, end in LEGS:
        report[name] = summarize([row[end] - row[start] for row in rows])
    return report


def format_report(report: Mapping[str, Any]) -> str:
    """A fixed-width text table of a :func:`latency_report` result."""
    columns = ["p50", "p90", "p95", "p99", "max"]
    lines = [f"{'leg (ms)':<16}" + "".join(f"{c:>9}" for c in columns)]
    for name, _start, _end in LEGS:
        leg = report.get(name, {})
        cells = "".join(f"{leg[c]:>9.0f}" if c in leg else f"{'-':>9}" for c in columns)
        lines.append(f"{name:<16}{cells}")
    lines.append(f"samples: {report.get('count', 0)}")
    return "\n".join(lines)
