"""The demo's command line: every flag checked before Spark or Postgres start.

Each numeric flag has one allowed range (:data:`RANGES`); a value outside it,
a value that is not a number, NaN or infinity stops the demo with exit code 2
and one line naming the flag and the range. The real-time trigger must be a
whole number of seconds, minutes or hours (``"10 seconds"``, ``"1 minute"``)
between 5 seconds and 1 hour: open-source Spark rejects anything under 5 s.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

#: The ways the demo runs the same workload, in the order it runs them.
PATHS = ("rtm-jvm", "rtm-fast-foreach", "rtm-python", "microbatch")
PATH_TITLES = {
    "rtm-jvm": "real-time mode + JVM sink",
    "rtm-fast-foreach": "real-time mode + fast Python foreach",
    "rtm-python": "real-time mode + Python foreach",
    "microbatch": "micro-batch (0 s trigger) + Python foreach",
}

MIN_TRIGGER_S = 5
MAX_TRIGGER_S = 3600


class OptionError(ValueError):
    """A flag's value is outside its allowed range; the message names the flag."""


@dataclass(frozen=True)
class Range:
    """Allowed values of one numeric flag (both ends inclusive unless ``hi_open``)."""

    lo: float
    hi: float
    integer: bool
    unit: str = ""
    hi_open: bool = False

    def describe(self) -> str:
        def show(value: float) -> str:
            return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"

        kind = "a whole number" if self.integer else "a number"
        top = f"below {show(self.hi)}" if self.hi_open else show(self.hi)
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind} from {show(self.lo)} to {top}{unit}"

    def parse(self, flag: str, text: str) -> float | int:
        raw = str(text).strip()
        try:
            value = int(raw, 10) if self.integer else float(raw)
        except ValueError:
            raise OptionError(f"{flag} must be {self.describe()}, got {text!r}") from None
        if not math.isfinite(value) or value < self.lo or value > self.hi \
                or (self.hi_open and value >= self.hi):
            raise OptionError(f"{flag} must be {self.describe()}, got {text!r}")
        return value


#: Allowed range of every numeric flag (the flag name is the key).
RANGES: dict[str, Range] = {
    "--rows": Range(1, 1_000_000, True, "rows per path"),
    "--rate": Range(1, 20_000, False, "rows per second"),
    "--keys": Range(1, 1_000_000, True, "devices"),
    "--duplicate-pct": Range(0, 100, False, "percent", hi_open=True),
    "--partitions": Range(1, 8, True, "source partitions"),
    "--max-batch-rows": Range(1, 100_000, True, "rows"),
    "--max-dwell-ms": Range(1, 60_000, True, "ms"),
    "--timeout": Range(1, 3600, False, "seconds per path"),
    "--seed": Range(0, 2**31 - 1, True),
}

_UNITS = {"second": 1, "seconds": 1, "sec": 1, "secs": 1, "s": 1,
          "minute": 60, "minutes": 60, "min": 60, "mins": 60, "m": 60,
          "hour": 3600, "hours": 3600, "h": 3600}
_DURATION = re.compile(r"^\s*(\d{1,7})\s*([a-z]+)\s*$")


def parse_trigger(text: str, flag: str = "--trigger") -> str:
    """``"10 seconds"``/``"1 min"``/``"30s"`` → Spark's ``"<n> seconds"``; out of range → :class:`OptionError`."""
    allowed = (f"{flag} must be a duration from {MIN_TRIGGER_S} seconds to 1 hour, "
               "e.g. '10 seconds' or '1 minute'")
    match = _DURATION.match(str(text).lower())
    if not match or match.group(2) not in _UNITS:
        raise OptionError(f"{allowed}, got {text!r}")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if not MIN_TRIGGER_S <= seconds <= MAX_TRIGGER_S:
        raise OptionError(f"{allowed}, got {text!r}")
    return f"{seconds} seconds"


@dataclass(frozen=True)
class DemoOptions:
    """One demo run. Defaults: four paths of 15,000 rows at 1,000 rows/s, about three minutes."""

    rows: int = 15_000
    rows_per_second: float = 1_000.0
    keys: int = 500
    duplicate_pct: float = 5.0
    partitions: int = 2
    pipeline: str = "dedup"          # "dedup" (stateful) or "passthrough" (stateless)
    # The checkpoint interval (minutes in production). 30 s keeps the demo short while each
    # 15-second feed fits in one long batch, so batch boundaries do not dominate the tail.
    trigger: str = "30 seconds"
    max_batch_rows: int = 1_000
    max_dwell_ms: int = 5
    timeout_s: float = 120.0
    keep_table: bool = False
    seed: int = 7
    paths: tuple[str, ...] = PATHS
    output_dir: str = "demo-output"
    #: "local" (one JVM, local[N]) or "standalone" (a master and two workers started for the run).
    master: str = "local"
    #: "kafka": the simulator produces into a topic of a real broker (KAFKA_BOOTSTRAP, or a throwaway
    #: local one) and each path reads it, as the seed does; "memory": the lab's in-memory source (fast tests).
    source: str = "kafka"

    def __post_init__(self) -> None:
        values = {"--rows": self.rows, "--rate": self.rows_per_second, "--keys": self.keys,
                  "--duplicate-pct": self.duplicate_pct, "--partitions": self.partitions,
                  "--max-batch-rows": self.max_batch_rows, "--max-dwell-ms": self.max_dwell_ms,
                  "--timeout": self.timeout_s, "--seed": self.seed}
        for flag, value in values.items():
            spec = RANGES[flag]
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or (spec.integer and not float(value).is_integer()):
                raise OptionError(f"{flag} must be {spec.describe()}, got {value!r}")
            spec.parse(flag, repr(int(value)) if spec.integer else repr(float(value)))
        object.__setattr__(self, "trigger", parse_trigger(self.trigger))
        if self.source not in ("kafka", "memory"):
            raise OptionError(f"--source must be 'kafka' or 'memory', got {self.source!r}")
        if self.pipeline not in ("dedup", "passthrough"):
            raise OptionError(f"--pipeline must be 'dedup' or 'passthrough', got {self.pipeline!r}")
        if not self.paths or any(path not in PATHS for path in self.paths):
            raise OptionError(f"--path must be 'all' or one of {', '.join(PATHS)}, got {self.paths!r}")
        # A Python foreach sink under real-time mode may hold rows until the long batch ends.
        needed = int(self.trigger.split()[0]) + self.rows / self.rows_per_second
        if "rtm-python" in self.paths and self.timeout_s < needed:
            raise OptionError(
                f"--timeout must be at least {math.ceil(needed)} seconds with --trigger "
                f"'{self.trigger}' and {self.rows} rows at {self.rows_per_second:g} rows/s: the Python "
                f"foreach path can hold rows until the long batch ends (or pick another --path)")

    @property
    def shuffle_partitions(self) -> int:
        return 2 if self.pipeline == "dedup" else 0


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (exit 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    defaults = DemoOptions()
    parser = _OneLineParser(
        prog="demo", description="Real-time mode into Postgres four ways: real-time mode with the "
        "JVM sink, with the Python foreach sink through the fast foreach path and through stock "
        "foreach, and micro-batch; "
        "same workload, verified and compared.")

    def number(flag: str, default: object, help_text: str) -> None:
        parser.add_argument(flag, default=str(default), metavar="N",
                            help=f"{help_text}; {RANGES[flag].describe()} (default {default})")

    number("--rows", defaults.rows, "rows the upstream sends on each path")
    number("--rate", f"{defaults.rows_per_second:g}", "input rate")
    number("--keys", defaults.keys, "distinct devices")
    number("--duplicate-pct", f"{defaults.duplicate_pct:g}", "share of rows that are upstream retries")
    number("--partitions", defaults.partitions, "source partitions")
    parser.add_argument("--source", choices=("kafka", "memory"), default=defaults.source,
                        help="kafka: produce into a topic of a real broker (KAFKA_BOOTSTRAP, or a throwaway "
                             "local one) and read it; memory: the lab's in-memory source (default: kafka)")
    parser.add_argument("--pipeline", choices=("dedup", "passthrough"), default=defaults.pipeline)
    parser.add_argument("--trigger", default=defaults.trigger,
                        help="real-time trigger duration (the checkpoint interval), 5 seconds to "
                             f"1 hour (default '{defaults.trigger}')")
    number("--max-batch-rows", defaults.max_batch_rows, "sink: flush after this many rows")
    number("--max-dwell-ms", defaults.max_dwell_ms, "sink: flush when the oldest row is this old")
    number("--timeout", f"{defaults.timeout_s:g}", "give up on a path after this long")
    number("--seed", defaults.seed, "simulator seed")
    parser.add_argument("--path", choices=("all",) + PATHS, default="all",
                        help="run one path only (default: all of them, one after the other)")
    parser.add_argument("--keep-table", action="store_true",
                        help="leave the demo tables in the database")
    parser.add_argument("--master", choices=("local", "standalone"), default=defaults.master,
                        help="local: one JVM (local[N]); standalone: start a Spark standalone master and "
                             "two workers on loopback for this run and stop them after (default: local)")
    parser.add_argument("--output-dir", default=defaults.output_dir,
                        help="where the JSON report and the chart go (default: demo-output)")
    return parser


def parse_args(argv: list[str] | None) -> DemoOptions:
    """Parse and check the command line; a bad value exits 2 with one line naming the flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        numbers = {flag: RANGES[flag].parse(flag, getattr(args, flag[2:].replace("-", "_")))
                   for flag in RANGES}
        output_dir = str(args.output_dir)
        if not output_dir.strip() or "\0" in output_dir:
            raise OptionError("--output-dir must be a folder path")
        if Path(output_dir).exists() and not Path(output_dir).is_dir():
            raise OptionError(f"--output-dir must be a folder, and {output_dir!r} is a file")
        return DemoOptions(
            rows=numbers["--rows"], rows_per_second=numbers["--rate"], keys=numbers["--keys"],
            duplicate_pct=numbers["--duplicate-pct"], partitions=numbers["--partitions"],
            pipeline=args.pipeline, trigger=args.trigger,
            max_batch_rows=numbers["--max-batch-rows"], max_dwell_ms=numbers["--max-dwell-ms"],
            timeout_s=numbers["--timeout"], keep_table=args.keep_table, seed=numbers["--seed"],
            paths=PATHS if args.path == "all" else (args.path,), output_dir=output_dir, master=args.master,
            source=args.source)
    except OptionError as exc:
        parser.error(str(exc))
