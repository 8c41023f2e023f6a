"""Statement-ordered view of a Python module: method chains with simple variable aliases resolved.

``q = df.writeStream; q = q.trigger(realTime=t)`` yields one chain
``df.writeStream.trigger(...)`` whose ``realTime`` argument resolves ``t`` to
the string assigned before. Scopes are not modelled (one flat namespace,
last assignment wins), which is what short snippets and example modules need.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_DEPTH = 40


@dataclass(frozen=True)
class Binding:
    expr: ast.expr
    env: Env


Env = dict  # name -> Binding (treated as immutable: copied on assignment)


@dataclass
class Link:
    """One ``.name`` or ``.name(...)`` step of a chain."""

    name: str
    attr: ast.Attribute
    call: ast.Call | None
    env: Env

    @property
    def line(self) -> int:
        return self.attr.end_lineno or self.attr.lineno

    @property
    def col(self) -> int:
        return (self.attr.end_col_offset or 0) - len(self.name) + 1

    def args(self) -> list[ast.expr]:
        if self.call is None:
            return []
        return list(self.call.args) + [k.value for k in self.call.keywords]

    def keyword(self, name: str) -> ast.expr | None:
        if self.call is None:
            return None
        for k in self.call.keywords:
            if k.arg == name:
                return k.value
        return None


@dataclass
class Chain:
    root: ast.expr
    root_env: Env
    links: list[Link] = field(default_factory=list)

    def named(self, *names: str) -> list[Link]:
        return [l for l in self.links if l.name in names]

    def has(self, *names: str) -> bool:
        return any(l.name in names for l in self.links)


def resolve(expr: ast.expr, env: Env, depth: int = 0) -> tuple[ast.expr, Env]:
    """Follow ``Name`` bindings to the expression last assigned to it."""
    while isinstance(expr, ast.Name) and expr.id in env and depth < MAX_DEPTH:
        b = env[expr.id]
        expr, env = b.expr, b.env
        depth += 1
    return expr, env


def flatten(expr: ast.expr, env: Env, depth: int = 0) -> Chain:
    if depth > MAX_DEPTH:
        return Chain(expr, env)
    if isinstance(expr, ast.Name) and expr.id in env:
        b = env[expr.id]
        return flatten(b.expr, b.env, depth + 1)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        chain = flatten(expr.func.value, env, depth + 1)
        return Chain(chain.root, chain.root_env, chain.links + [Link(expr.func.attr, expr.func, expr, env)])
    if isinstance(expr, ast.Attribute):
        chain = flatten(expr.value, env, depth + 1)
        return Chain(chain.root, chain.root_env, chain.links + [Link(expr.attr, expr, None, env)])
    return Chain(expr, env)


def callee_name(call: ast.AST) -> str | None:
    """``f(...)`` -> 'f', ``F.f(...)`` -> 'f'."""
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _expr_children(stmt: ast.stmt) -> Iterator[ast.AST]:
    for _name, value in ast.iter_fields(stmt):
        if isinstance(value, list):
            for v in value:
                if isinstance(v, ast.AST) and not isinstance(v, (ast.stmt, ast.excepthandler, ast.match_case)):
                    yield v
        elif isinstance(value, ast.AST) and not isinstance(value, ast.stmt):
            yield value


def _child_bodies(stmt: ast.AST) -> Iterator[list[ast.stmt]]:
    for _name, value in ast.iter_fields(stmt):
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value
        elif isinstance(value, list):
            for v in value:
                if isinstance(v, (ast.excepthandler, ast.match_case)):
                    yield from _child_bodies(v)


def _tops(node: ast.AST) -> Iterator[ast.expr]:
    """Outermost Call/Attribute nodes of every chain inside an expression tree."""
    stack = [(node, False)]
    while stack:
        n, inner = stack.pop()
        is_link = isinstance(n, (ast.Call, ast.Attribute))
        if is_link and not inner:
            yield n
        for fieldname, child in ast.iter_fields(n):
            children = child if isinstance(child, list) else [child]
            for c in children:
                if not isinstance(c, ast.AST):
                    continue
                # The receiver of an attribute and the callee of a call are part of the same chain.
                same_chain = is_link and ((isinstance(n, ast.Attribute) and fieldname == "value")
                                          or (isinstance(n, ast.Call) and fieldname == "func"))
                stack.append((c, same_chain))


class Flow:
    """Chains (with their environment) of every expression, in statement order."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.chains: list[Chain] = []
        self.calls: list[tuple[ast.Call, Env]] = []
        self._walk(tree.body, {})

    def _walk(self, body: list[ast.stmt], env: Env) -> Env:
        for stmt in body:
            for expr in _expr_children(stmt):
                for top in _tops(expr):
                    self.chains.append(flatten(top, env))
                for n in ast.walk(expr):
                    if isinstance(n, ast.Call):
                        self.calls.append((n, env))
            for sub in _child_bodies(stmt):
                env = self._walk(sub, env)
            env = self._bind(stmt, env)
        return env

    @staticmethod
    def _bind(stmt: ast.stmt, env: Env) -> Env:
        targets: list[ast.expr] = []
        value = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if value is None or not names:
            return env
        new = dict(env)
        for name in names:
            new[name] = Binding(value, env)
        return new
