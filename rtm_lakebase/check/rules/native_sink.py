"""LBS001-LBS003: Databricks' native Lakebase streaming sink, ``writeStream.format("postgresql")``.

The sink takes a documented option set and refuses any other option
(``JDBC_STREAMING_SINK_INVALID_OPTIONS``); written by endpoint (``.start()``)
it needs ``endpoint`` and ``dbtable``; ``batchinterval`` is a Spark interval
string, so ``"100 ms"`` fails (``INVALID_INTERVAL_FORMAT.INVALID_UNIT``).
Options are collected from ``.option(k, v)`` and ``.options(...)`` with keys
and values followed through variables, dicts and ``**kwargs``
(:mod:`kwargs`). Source: "Connect to Lakebase" (Structured Streaming), read
2026-11-25; see references/lakebase-sink-python.md.
"""

from __future__ import annotations

import ast
import re

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.rules.flow import Chain, Flow, resolve
from rtm_lakebase.check.rules.kwargs import keywords

DOCUMENTED = {"endpoint", "database", "dbtable", "upsertkey", "batchsize", "batchinterval",
              "checkpointlocation"}
REQUIRED_BY_ENDPOINT = ("endpoint", "dbtable")
#: Units Spark's interval parser accepts (singular and plural); abbreviations like "ms" are refused.
_UNITS = {"microsecond", "millisecond", "second", "minute", "hour", "day", "week"}
_PART_RE = re.compile(r"\s*(\d+)\s+([a-z]+)\s*")


def spark_interval_ok(text: str) -> bool:
    s = text.strip().lower()
    if s.startswith("interval "):
        s = s[len("interval "):]
    pos, seen = 0, False
    for m in _PART_RE.finditer(s):
        if m.start() != pos or m.group(2).rstrip("s") not in _UNITS:
            return False
        pos, seen = m.end(), True
    return seen and pos == len(s)


def _const(expr, env):
    value, _ = resolve(expr, env)
    return value.value if isinstance(value, ast.Constant) else None


def _is_postgres_sink(chain: Chain) -> bool:
    for l in chain.named("format"):
        if l.call is not None and l.call.args and _const(l.call.args[0], l.env) == "postgresql":
            return True
    return False


def check_chain(chain: Chain, path: str) -> list[Finding]:
    if not _is_postgres_sink(chain) or not chain.has("writeStream"):
        return []
    out: list[Finding] = []
    options: dict[str, tuple[ast.expr, object, object]] = {}
    complete = True
    for l in chain.named("option", "options"):
        if l.name == "option":
            if l.call is None or len(l.call.args) < 2:
                complete = False
                continue
            key = _const(l.call.args[0], l.env)
            if not isinstance(key, str):
                complete = False
                continue
            options[key.lower()] = (l.call.args[1], l.env, l)
        else:
            kws, ok = keywords(l)
            complete = complete and ok and not (l.call is not None and l.call.args)
            for key, (value, env) in kws.items():
                options[key.lower()] = (value, env, l)
    for key, (_value, _env, link) in options.items():
        if key not in DOCUMENTED:
            out.append(Finding(path, link.line, link.col, "LBS001",
                               f"option {key!r} is not a Lakebase sink option (JDBC_STREAMING_SINK_INVALID_OPTIONS)"))
    if "batchinterval" in options:
        value, env, link = options["batchinterval"]
        text = _const(value, env)
        if isinstance(text, str) and not spark_interval_ok(text):
            out.append(Finding(path, link.line, link.col, "LBS003",
                               f"batchinterval {text!r} is not a Spark interval; write e.g. \"100 milliseconds\""))
    starts = chain.named("start")
    if starts and not chain.has("toTable") and complete:
        missing = [k for k in REQUIRED_BY_ENDPOINT if k not in options]
        if missing:
            out.append(Finding(path, starts[0].line, starts[0].col, "LBS002",
                               f"Lakebase sink started without {', '.join(missing)} (or write .toTable(\"catalog.schema.table\"))"))
    return out


def check(flow: Flow, path: str) -> list[Finding]:
    out: list[Finding] = []
    for chain in flow.chains:
        out += check_chain(chain, path)
    return out
