"""SQL001: SQL text assembled with an f-string, ``%``, ``+`` or ``str.format`` and passed to execute/executemany/copy.

``psycopg.sql.SQL("...").format(...)`` is the safe way to compose identifiers
and is not flagged (its receiver is not a plain string).
"""

from __future__ import annotations

import ast

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.rules.flow import Env, Flow, resolve

SQL_METHODS = ("execute", "executemany", "copy")


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def how_built(expr: ast.expr, env: Env) -> str | None:
    expr, env = resolve(expr, env)
    if isinstance(expr, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in expr.values):
        return "an f-string"
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        left, _ = resolve(expr.left, env)
        if _is_str(left):
            return "'%' formatting"
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        left, _ = resolve(expr.left, env)
        right, _ = resolve(expr.right, env)
        both_literal = isinstance(left, ast.Constant) and isinstance(right, ast.Constant)
        if (_is_str(left) or _is_str(right)) and not both_literal:
            return "string concatenation"
        return how_built(expr.left, env) or how_built(expr.right, env)
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format"):
        receiver, _ = resolve(expr.func.value, env)
        if _is_str(receiver):
            return "str.format()"
    return None


def check(flow: Flow, path: str) -> list[Finding]:
    out: list[Finding] = []
    for call, env in flow.calls:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr in SQL_METHODS):
            continue
        query = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "query"), None)
        if query is None:
            continue
        how = how_built(query, env)
        if how:
            out.append(Finding(path, query.lineno, query.col_offset + 1, "SQL001",
                               f"SQL for .{call.func.attr}() built with {how}; use %s parameters or psycopg.sql"))
    return out
