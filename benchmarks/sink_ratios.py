"""Each write mode of the Python sink as a ratio to a raw ``COPY`` timed in the same run: the CI floor.

Four modes of ``PostgresForeachWriter`` write the same rows (bigint key, bigint
version, ~80-byte text), each beside a raw ``COPY`` of those rows into an empty
table of the same shape, on one Postgres, one process, one connection each:

- ``append``: ``mode="append"`` (``COPY``) into a table without key, against ``COPY`` into such a table;
- ``upsert``: new keys into an empty keyed table;
- ``versioned_upsert``: ``version_column="version"``, every key already stored with an older version;
- ``replay``: every row already stored unchanged (``skip_unchanged`` skips them all);

the three keyed modes against ``COPY`` into an empty keyed table. Rounds are
interleaved (every mode and both ``COPY`` once per round, the order rotating),
each mode's ratio is the median over rounds of ``mode rows/s ÷ the same round's
COPY rows/s``: both sides run on the same machine at the same moment, so the
ratio holds on a loaded machine where rows/s do not.

``tests/sink/test_sink_throughput_floor.py`` runs :func:`measure` with the CI
sizes and fails when a mode's ratio falls below its floor in
``benchmarks/results/sink_ratio_floors.json``, written by this script::

    nice -n 10 .venv/bin/python benchmarks/sink_ratios.py --runs 5 --write-floors   # sets the floors
    .venv/bin/python benchmarks/sink_ratios.py                                      # one measurement

Uses ``PG_DSN`` when set, otherwise a throwaway local Postgres.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FLOORS = ROOT / "benchmarks" / "results" / "sink_ratio_floors.json"
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "sink_ratios.json"

#: The CI measurement: rows per run, rows per flush, interleaved rounds (about 5 s on 2 idle cores, 25 s loaded).
CI_ROWS, CI_BATCH, CI_ROUNDS = 10_000, 1000, 5
#: A floor is this share of the lowest median measured by ``--write-floors`` (a safe margin under load).
MARGIN = 0.6


#: mode name -> (SinkSettings keywords, keyed table, preloaded version or None, written version)
MODES: dict[str, tuple[dict[str, Any], bool, int | None, int]] = {
    "append": ({"mode": "append"}, False, None, 1),
    "upsert": ({"mode": "upsert", "key_columns": ("id",)}, True, None, 1),
    "versioned_upsert": ({"mode": "upsert", "key_columns": ("id",), "version_column": "version"}, True, 1, 2),
    "replay": ({"mode": "upsert", "key_columns": ("id",)}, True, 1, 1),
}
#: The two ceilings: COPY into an empty table without / with the primary key.
COPY, KEYED_COPY = "copy", "keyed_copy"


#: Row shapes: the column definitions after ``id bigint``, and the rows. ``narrow`` is the sink benchmark's
#: (bigint key, bigint version, ~80-byte text); ``typed`` adds a double, a numeric and a timestamptz, as
#: Spark hands them to a Python writer (float, Decimal, naive local datetime).
SHAPES: dict[str, str] = {
    "narrow": "version bigint, name text",
    "typed": "version bigint, name text, amount double precision, price numeric(12,2), at timestamptz",
}


def columns_of(shape: str) -> tuple[str, ...]:
    return ("id", *(c.split()[0] for c in SHAPES[shape].split(", ")))


def make_rows(n: int, version: int = 1, shape: str = "narrow") -> list[tuple]:
    pad = "x" * 64
    if shape == "narrow":
        return [(i, version, f"row-{i:012d}-{pad}") for i in range(n)]
    base = dt.datetime(2026, 11, 24, 12, 0, 0)
    return [(i, version, f"row-{i:012d}-{pad}", i * 0.25 + 0.1, Decimal(i % 100_000) / 100,
             base + dt.timedelta(milliseconds=i)) for i in range(n)]


def load_sink() -> tuple[type, type]:
    """``(PostgresForeachWriter, SinkSettings)`` of the ``rtm_lakebase`` on ``sys.path`` (old layouts too)."""
    import rtm_lakebase

    if (Path(rtm_lakebase.__file__).parent / "sink").is_dir():
        from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
    else:  # the flat layout before 2026-11-25 (sink_profile.py times older revisions)
        from rtm_lakebase.lakebase_sink import PostgresForeachWriter, SinkSettings
    return PostgresForeachWriter, SinkSettings


class Bench:
    """One connection, one table name; runs a mode or a ``COPY`` and returns its rows/s."""

    def __init__(self, dsn: str, rows: int, batch: int, table: str = "sink_ratio_bench",
                 sink: tuple[type, type] | None = None, shape: str = "narrow"):
        import psycopg
        from psycopg import sql

        self.dsn, self.n, self.batch, self.table, self.shape = dsn, rows, batch, table, shape
        self.columns = columns_of(shape)
        self.writer_cls, self.settings_cls = sink or load_sink()
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.ident = sql.Identifier(table)
        self._copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
            self.ident, sql.SQL(", ").join(sql.Identifier(c) for c in self.columns))
        self.data = {v: make_rows(rows, v, shape) for v in (1, 2)}
        with contextlib.suppress(Exception):  # start from a clean slate (needs superuser; fine without)
            self.conn.execute("CHECKPOINT")

    def close(self) -> None:
        from psycopg import sql

        try:
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self.ident))
        finally:
            self.conn.close()

    def reset(self, keyed: bool, preload: int | None) -> None:
        from psycopg import sql

        self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self.ident))
        self.conn.execute(sql.SQL("CREATE TABLE {} (id bigint{}, " + SHAPES[self.shape] + ")").format(
            self.ident, sql.SQL(" PRIMARY KEY" if keyed else "")))
        if preload is not None:
            self.copy(self.data[preload])
            self.conn.execute(sql.SQL("VACUUM ANALYZE {}").format(self.ident))  # as a table written long ago

    def copy(self, rows: Sequence[tuple]) -> None:
        conn = self.conn
        with conn.cursor() as cur:
            for start in range(0, len(rows), self.batch):
                with conn.transaction(), cur.copy(self._copy_sql) as cp:
                    for row in rows[start:start + self.batch]:
                        cp.write_row(row)

    def through_sink(self, mode: str) -> None:
        keywords, _keyed, _preload, version = MODES[mode]
        writer = self.writer_cls(self.dsn, self.settings_cls(
            table=self.table, columns=self.columns, max_batch_rows=self.batch, max_dwell_ms=0, **keywords))
        writer.open(0, 0)
        conn = getattr(getattr(writer, "_target", None), "conn", None)  # lab only: whose server CPU to read
        self.backend_pid = conn.info.backend_pid if conn is not None else None
        self._server_cpu_before = _proc_cpu_s(self.backend_pid)
        process = writer.process
        for row in self.data[version]:
            process(row)
        writer.close(None)

    def action(self, name: str) -> Callable[[], None]:
        if name in (COPY, KEYED_COPY):
            return lambda: self.copy(self.data[1])
        return lambda: self.through_sink(name)

    def setup_of(self, name: str) -> tuple[bool, int | None]:
        if name in (COPY, KEYED_COPY):
            return name == KEYED_COPY, None
        _keywords, keyed, preload, _version = MODES[name]
        return keyed, preload

    def timed(self, name: str) -> tuple[float, float, float | None]:
        """One run of ``name`` into a fresh table (the reset is not timed): rows/s, and CPU µs per row
        of this process (every thread) and of the Postgres backend that wrote (None when not local)."""
        from psycopg import sql

        self.reset(*self.setup_of(name))
        action = self.action(name)
        copying = name in (COPY, KEYED_COPY)
        self.backend_pid = self.conn.info.backend_pid if copying else None
        self._server_cpu_before = _proc_cpu_s(self.backend_pid) if copying else None
        cpu = time.process_time()
        started = time.perf_counter()
        action()
        seconds = time.perf_counter() - started
        client_cpu = time.process_time() - cpu
        after = _proc_cpu_s(self.backend_pid)
        server_cpu = after - self._server_cpu_before if after is not None and self._server_cpu_before is not None \
            else None
        count = self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self.ident)).fetchone()[0]
        if count != self.n:
            raise AssertionError(f"{name}: {count} rows in the table after writing {self.n}")
        return (self.n / seconds, client_cpu / self.n * 1e6,
                server_cpu / self.n * 1e6 if server_cpu is not None else None)


def _proc_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) of process ``pid`` from /proc; None where unreadable (remote server)."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def baseline_of(mode: str) -> str:
    return KEYED_COPY if MODES[mode][1] else COPY


def measure(dsn: str, rows: int = CI_ROWS, batch: int = CI_BATCH, rounds: int = CI_ROUNDS,
            modes: Sequence[str] = tuple(MODES), sink: tuple[type, type] | None = None,
            log: Callable[[str], None] | None = None, shape: str = "narrow") -> dict[str, Any]:
    """Interleaved rounds of every mode and its ``COPY``; per mode the median ratio over rounds."""
    bench = Bench(dsn, rows, batch, sink=sink, shape=shape)
    names = [COPY, KEYED_COPY, *modes]
    per_round: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[tuple[float, float | None]]] = {name: [] for name in names}
    load = [os.getloadavg()[0]] if hasattr(os, "getloadavg") else []
    try:
        for name in names:  # warm-up, not counted: the first connection, statement and plan
            bench.reset(*bench.setup_of(name))
            bench.action(name)()
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # rotate: no mode always right after COPY
            for name in order:
                rate, client_us, server_us = bench.timed(name)
                per_round[name].append(rate)
                cpu[name].append((client_us, server_us))
            if log:
                log(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {per_round[n][-1]:,.0f}/s" for n in names))
    finally:
        bench.close()
    if hasattr(os, "getloadavg"):
        load.append(os.getloadavg()[0])
    out: dict[str, Any] = {"shape": shape, "rows": rows, "batch": batch, "rounds": rounds,
                           "load_average_1m": [round(x, 2) for x in load], "modes": {}}
    for name in names:
        server = [c[1] for c in cpu[name] if c[1] is not None]
        entry: dict[str, Any] = {"rows_per_s": [round(x) for x in per_round[name]],
                                 "client_cpu_us_per_row": round(statistics.median(c[0] for c in cpu[name]), 2),
                                 "server_cpu_us_per_row": round(statistics.median(server), 2) if server else None}
        if name in MODES:
            base = per_round[baseline_of(name)]
            ratios = [m / c for m, c in zip(per_round[name], base, strict=True)]
            entry.update(baseline=baseline_of(name), ratio_per_round=[round(x, 3) for x in ratios],
                         ratio=round(statistics.median(ratios), 3))
        out["modes"][name] = entry
    return out


def read_floors(path: Path = FLOORS) -> dict[str, float]:
    return json.loads(path.read_text(encoding="utf-8"))["floors"]


def check(result: dict[str, Any], floors: dict[str, float]) -> list[str]:
    """One line per measured mode whose median ratio to ``COPY`` is below its floor."""
    failures = []
    for mode, floor in floors.items():
        entry = result["modes"].get(mode)
        if entry is not None and entry["ratio"] < floor:
            failures.append(f"{mode}: {entry['ratio']:.3f}x {entry['baseline']} is below its floor {floor:.3f}x "
                            f"(per round {entry['ratio_per_round']})")
    return failures


def floors_from(runs: Sequence[dict[str, Any]], margin: float = MARGIN) -> dict[str, float]:
    """Per mode: ``margin`` × the lowest median ratio over ``runs``, rounded down to 0.01."""
    return {mode: int(min(run["modes"][mode]["ratio"] for run in runs) * margin * 100) / 100 for mode in MODES}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1, help="whole measurements, one after the other (default 1)")
    p.add_argument("--rows", type=int, default=CI_ROWS)
    p.add_argument("--batch", type=int, default=CI_BATCH)
    p.add_argument("--rounds", type=int, default=CI_ROUNDS)
    p.add_argument("--dsn", default=None, help="Postgres DSN (default: $PG_DSN, else a throwaway server)")
    p.add_argument("--output", default=str(DEFAULT_OUTPUT))
    p.add_argument("--write-floors", action="store_true",
                   help=f"write {FLOORS.relative_to(ROOT)}: {MARGIN} x the lowest median per mode (CI sizes only)")
    args = p.parse_args(argv)
    if args.runs < 1 or args.rows < args.batch or args.batch < 1 or args.rounds < 1:
        p.error("--runs, --rounds and --batch must be at least 1 and --rows at least --batch")
    if args.write_floors and (args.rows, args.batch, args.rounds) != (CI_ROWS, CI_BATCH, CI_ROUNDS):
        p.error("--write-floors needs the CI sizes (the defaults): the test measures with those")
    from pack_lab.local_postgres import postgres_dsn

    def say(message: str) -> None:
        print(f"[sink-ratios {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    runs = []
    with postgres_dsn() if args.dsn is None else contextlib.nullcontext(args.dsn) as dsn:
        for i in range(args.runs):
            say(f"run {i + 1} of {args.runs}: {args.rows:,} rows, {args.rounds} interleaved rounds")
            run = measure(dsn, args.rows, args.batch, args.rounds, log=say)
            say("  " + ", ".join(f"{m} {run['modes'][m]['ratio']:.3f}x" for m in MODES))
            runs.append(run)
    report = {"benchmark": "sink_ratios", "command": "benchmarks/sink_ratios.py " + " ".join(argv or sys.argv[1:]),
              "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
              "note": "shared 2-core machine; ratios pair each mode with COPY timed in the same round",
              "runs": runs, "median_ratio_per_run": {m: [r["modes"][m]["ratio"] for r in runs] for m in MODES}}
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    say(f"wrote {args.output}")
    if args.write_floors:
        floors = floors_from(runs)
        FLOORS.write_text(json.dumps({
            "about": "CI floor per mode of the Python sink: median ratio to a raw COPY timed in the same run "
                     "(tests/sink/test_sink_throughput_floor.py); each floor is margin x the lowest median of "
                     "the runs below, written by benchmarks/sink_ratios.py --write-floors",
            "margin": MARGIN, "rows": CI_ROWS, "batch": CI_BATCH, "rounds": CI_ROUNDS, "floors": floors,
            "measured": report["median_ratio_per_run"], "date": report["date"],
            "load_average_1m": [r["load_average_1m"] for r in runs]}, indent=1) + "\n", encoding="utf-8")
        say(f"wrote {FLOORS}: {floors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
