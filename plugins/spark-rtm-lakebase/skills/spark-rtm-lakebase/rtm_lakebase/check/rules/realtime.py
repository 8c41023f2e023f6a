"""Real-time mode query rules (RTM001-RTM009) over method chains.

A chain is a real-time query when it contains ``.trigger(realTime=...)``.
Aliases are followed (see :mod:`flow`), so the DataFrame transformations
before ``writeStream`` and writer steps split across variables are one chain.
"""

from __future__ import annotations

import ast
import re

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.rules.flow import Chain, Env, Flow, Link, callee_name, flatten, resolve
from rtm_lakebase.check.rules.kwargs import keywords

MIN_SECONDS = 5.0

_UNITS = {
    "us": 1e-6, "usec": 1e-6, "usecs": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
    "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "week": 604800.0, "weeks": 604800.0,
}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")


def parse_duration(text: str) -> float | None:
    """Seconds in a Spark interval string ('5 seconds', '500 milliseconds', '1 minute 30 seconds', '5s'); None if unparseable."""
    s = text.strip().lower()
    if s.startswith("interval"):
        s = s[len("interval"):].strip()
    if not s:
        return None
    total, pos = 0.0, 0
    for m in _PART_RE.finditer(s):
        if s[pos:m.start()].strip():
            return None
        unit = _UNITS.get(m.group(2))
        if unit is None:
            return None
        total += float(m.group(1)) * unit
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        return None
    return total


def _check_duration(value: ast.expr, env: Env, line: int, col: int, path: str) -> list[Finding]:
    value, _ = resolve(value, env)
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        seconds = parse_duration(value.value)
        if seconds is None:
            return [Finding(path, line, col, "RTM002", f"real-time duration {value.value!r} is not a Spark interval string like \"5 seconds\"")]
        if seconds < MIN_SECONDS:
            return [Finding(path, line, col, "RTM002", f"real-time duration {value.value!r} is under the 5 second minimum")]
        return []
    if isinstance(value, ast.Constant):
        return [Finding(path, line, col, "RTM001", f"realTime={value.value!r}: pass a duration string such as \"5 seconds\"")]
    return []


def _is_broadcast(expr: ast.expr, env: Env) -> bool | None:
    """True if visibly broadcast, False if visibly not, None if unknown."""
    chain = flatten(expr, env)
    if any(l.name == "hint" and l.call is not None and l.call.args
           and isinstance(l.call.args[0], ast.Constant)
           and str(l.call.args[0].value).lower() in ("broadcast", "broadcastjoin", "mapjoin")
           for l in chain.links):
        return True
    if any(l.name == "broadcast" and l.call is not None for l in chain.links):
        return True  # F.broadcast(static)
    root, _ = resolve(chain.root, chain.root_env)
    if callee_name(root) == "broadcast":
        return True
    return False


def udf_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
                if name in ("udf", "pandas_udf"):
                    names.add(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if callee_name(node.value) in ("udf", "pandas_udf") or (
                    callee_name(node.value) == "register" and "udf" in ast.unparse(node.value.func)):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _arg_nodes(link: Link) -> list[tuple[ast.AST, Env]]:
    """Arguments of a link, with Name arguments also resolved to their assigned expression."""
    out: list[tuple[ast.AST, Env]] = []
    for a in link.args():
        out.append((a, link.env))
        for n in ast.walk(a):
            if isinstance(n, ast.Name):
                r, renv = resolve(n, link.env)
                if r is not n:
                    out.append((r, renv))
    return out


def _finding(link: Link, path: str, code: str, msg: str) -> Finding:
    return Finding(path, link.line, link.col, code, msg)


def check_chain(chain: Chain, udfs: set[str], path: str) -> list[Finding]:
    out: list[Finding] = []
    rt_links = []
    for l in chain.named("trigger"):  # realTime=..., or **{"realTime": ...} through variables
        value = keywords(l)[0].get("realTime")
        if value is not None:
            rt_links.append(l)
            out += _check_duration(value[0], value[1], l.line, l.col, path)
    for l in chain.named("RealTime"):
        if l.call is not None and l.call.args:
            out += _check_duration(l.call.args[0], l.env, l.line, l.col, path)
    if not rt_links and not chain.has("RealTime"):
        return out
    anchor = (rt_links or chain.named("RealTime"))[0]
    for l in chain.named("foreachBatch"):
        out.append(_finding(l, path, "RTM003", "foreachBatch is rejected in a real-time query; use foreach(writer)"))
    # The mode comes from .outputMode(m) or from start()/toTable()'s outputMode= keyword (also through **kwargs).
    modes: list[tuple[Link, ast.expr | None, Env]] = []
    mode_unknown = False
    for l in chain.named("outputMode"):
        arg = l.call.args[0] if l.call is not None and l.call.args else None
        modes.append((l, arg, l.env))
    for l in chain.named("start", "toTable"):
        kws, complete = keywords(l)
        mode_unknown = mode_unknown or not complete
        if "outputMode" in kws:
            modes.append((l, kws["outputMode"][0], kws["outputMode"][1]))
    for l, arg, env in modes:
        if arg is not None:
            value, _ = resolve(arg, env)
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.lower() != "update":
                out.append(_finding(l, path, "RTM004", f"outputMode({value.value!r}) in a real-time query; only \"update\" runs"))
    # Only where this chain creates the writer: one received from elsewhere (a parameter) may have its mode.
    if not modes and not mode_unknown and chain.has("writeStream") and chain.has("start", "toTable"):
        out.append(_finding(anchor, path, "RTM004", "real-time query without outputMode(\"update\") (the default, append, is rejected)"))
    for l in chain.named("dropDuplicatesWithinWatermark"):
        out.append(_finding(l, path, "RTM005", "dropDuplicatesWithinWatermark is not supported in an open-source real-time query (Spark 4.x; older Databricks runtimes)"))
    for l in chain.named("mapInPandas", "mapInArrow"):
        out.append(_finding(l, path, "RTM007", f"{l.name} is not supported in a real-time query"))
    for l in chain.links:
        for node, _env in _arg_nodes(l):
            for n in ast.walk(node):
                name = callee_name(n)
                if name == "session_window" or (isinstance(n, ast.Constant) and isinstance(n.value, str)
                                                 and "session_window(" in n.value):
                    out.append(_finding(l, path, "RTM008", "session windows are not supported in a real-time query"))
                if isinstance(n, ast.Call) and (
                        (isinstance(n.func, ast.Name) and n.func.id in udfs)
                        or callee_name(n.func) in ("udf", "pandas_udf")):
                    out.append(_finding(l, path, "RTM006", f"Python/pandas UDF used in .{l.name}() of a real-time query"))
    for l in chain.named("join"):
        other = l.call.args[0] if l.call is not None and l.call.args else l.keyword("other")
        if other is not None and _is_broadcast(other, l.env) is False:
            out.append(_finding(l, path, "RTM009", "join in a real-time query without broadcast() on the static side"))
    return out


def check(flow: Flow, path: str) -> list[Finding]:
    udfs = udf_names(flow.tree)
    out: list[Finding] = []
    for chain in flow.chains:
        out += check_chain(chain, udfs, path)
    return out
