"""SINK001: a foreach writer whose ``open()`` returns a falsy value from an ``except`` handler.

Spark skips a partition silently when ``open(partition_id, epoch_id)``
returns a falsy value, so swallowing a connection error there drops rows
without failing the query. The handler must re-raise instead.
"""

from __future__ import annotations

import ast

from rtm_lakebase.check.findings import Finding


def _is_open(node: ast.AST) -> bool:
    return (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "open"
            and len(node.args.args) + len(node.args.posonlyargs) >= 3)


def _falsy_return(node: ast.Return) -> bool:
    v = node.value
    if v is None:
        return True
    return isinstance(v, ast.Constant) and not v.value


def _returns_in(body: list[ast.stmt]):
    """Return statements of a handler, not descending into nested functions or classes."""
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))


def _own_nodes(fn: ast.AST):
    """Nodes of a function body, not descending into nested functions, classes or lambdas."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))


def check(tree: ast.Module, path: str) -> list[Finding]:
    out: list[Finding] = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if not _is_open(fn):
                continue
            for node in _own_nodes(fn):
                if isinstance(node, ast.ExceptHandler):
                    for ret in _returns_in(node.body):
                        if _falsy_return(ret):
                            shown = ast.unparse(ret)
                            out.append(Finding(path, ret.lineno, ret.col_offset + 1, "SINK001",
                                               f"{cls.name}.open() does `{shown}` in an except handler: Spark then skips the partition's rows silently; re-raise"))
    return out
