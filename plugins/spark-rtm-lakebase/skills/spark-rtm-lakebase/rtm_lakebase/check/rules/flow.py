"""Statement-ordered view of a Python module: method chains with simple variable aliases resolved.

``q = df.writeStream; q = q.trigger(realTime=t)`` yields one chain
``df.writeStream.trigger(...)`` whose ``realTime`` argument resolves ``t`` to
the string assigned before. Scopes are not modelled (one flat namespace,
last assignment wins), which is what short snippets and example modules need.

Helper functions are followed too (user code builds a query in one function
and starts it in another): a call ``build(spark)`` to a function defined in
the module stands for the expression its last ``return`` gives, and a
function called in the module is walked once per call site (up to
``MAX_SITES``) with its parameters bound to that call's arguments. A function
never called in the module (an entry point) is walked with unbound parameters.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_DEPTH = 40
#: Call sites per helper function walked with bound parameters, and total body walks per module.
MAX_SITES = 8
MAX_WALKS = 400
#: Env key under which a helper function's return expression is bound: ``RETURNS + name``.
RETURNS = "()"


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
    while depth < MAX_DEPTH:
        key = _key(expr, env)
        if key is None:
            break
        b = env[key]
        expr, env = b.expr, b.env
        depth += 1
    return expr, env


def _key(expr: ast.expr, env: Env) -> str | None:
    """The env key ``expr`` stands for: a bound name, or a call of a helper function with a known return."""
    if isinstance(expr, ast.Name) and expr.id in env:
        return expr.id
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        if call_key(expr) in env:  # this very call, walked with its arguments bound
            return call_key(expr)
        if RETURNS + expr.func.id in env:
            return RETURNS + expr.func.id
    return None


def call_key(call: ast.Call) -> str:
    """Env key of one call site's return (set where the helper was walked with that call's arguments)."""
    return f"{RETURNS}@{id(call)}"


def flatten(expr: ast.expr, env: Env, depth: int = 0) -> Chain:
    if depth > MAX_DEPTH:
        return Chain(expr, env)
    key = _key(expr, env)
    if key is not None:
        b = env[key]
        return flatten(b.expr, b.env, depth + 1)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        chain = flatten(expr.func.value, env, depth + 1)
        return Chain(chain.root, chain.root_env, chain.links + [Link(expr.func.attr, expr.func, expr, env)])
    if isinstance(expr, ast.Attribute):
        chain = flatten(expr.value, env, depth + 1)
        return Chain(chain.root, chain.root_env, chain.links + [Link(expr.attr, expr, None, env)])
    return Chain(expr, env)


def _is_mapping(expr: ast.expr) -> bool:
    """A dict literal or a ``dict(...)`` call (item assignment on anything else is left alone)."""
    return isinstance(expr, ast.Dict) or (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
                                          and expr.func.id == "dict")


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


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args]


def _called_names(tree: ast.Module) -> set[str]:
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


class Flow:
    """Chains (with their environment) of every expression, in statement order."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.chains: list[Chain] = []
        self.calls: list[tuple[ast.Call, Env]] = []
        self._called = _called_names(tree)
        self._defs: dict[str, tuple[ast.FunctionDef | ast.AsyncFunctionDef, Env]] = {}
        self._sites: dict[str, int] = {}
        self._active: list[str] = []
        self._walks = 0
        self._returns: list[tuple[ast.expr, Env]] | None = None
        self._entries: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, Env]] = []
        self._walk(tree.body, {})
        # Entry points (functions and methods nobody in the module calls) run after the module body has
        # defined every helper, as at run time; then helpers no walk reached are walked unbound.
        for fn, env in self._entries:
            self._walk_function(fn, env, None)
        for name, (fn, env) in list(self._defs.items()):
            if not self._sites.get(name):
                self._walk_function(fn, env, None)

    def _walk(self, body: list[ast.stmt], env: Env) -> Env:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                env = self._define(stmt, env)
                continue
            if isinstance(stmt, ast.Return) and stmt.value is not None and self._returns is not None:
                self._returns.append((stmt.value, env))
            exprs = list(_expr_children(stmt))
            for expr in exprs:  # helpers first (innermost call first), so chains through their calls see the return
                for n in reversed(list(ast.walk(expr))):
                    if isinstance(n, ast.Call):
                        env = self._expand(n, env)
            for expr in exprs:
                for top in _tops(expr):
                    self.chains.append(flatten(top, env))
                for n in ast.walk(expr):
                    if isinstance(n, ast.Call):
                        self.calls.append((n, env))
            if isinstance(stmt, ast.ClassDef):
                self._walk_class(stmt, env)
                continue
            for sub in _child_bodies(stmt):
                env = self._walk(sub, env)
            env = self._bind(stmt, env)
        return env

    def _walk_class(self, cls: ast.ClassDef, env: Env) -> None:
        """Methods are walked once with unbound parameters; their names stay local to the class."""
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._entries.append((stmt, env))
            elif isinstance(stmt, ast.ClassDef):
                self._walk_class(stmt, env)
            else:
                env = self._walk([stmt], env)

    def _define(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, env: Env) -> Env:
        """Record a function: its returns become ``RETURNS + name``; its body is walked now unless it is called."""
        if fn.name not in self._called:
            self._entries.append((fn, env))
            return env
        returns = self._walk_function(fn, env, None, keep=False)
        new = dict(env)
        new.pop(fn.name, None)
        if returns:
            expr, renv = returns[-1]
            new[RETURNS + fn.name] = Binding(expr, renv)
        else:
            new.pop(RETURNS + fn.name, None)
        self._defs[fn.name] = (fn, new)
        return new

    def _expand(self, call: ast.Call, env: Env) -> Env:
        """Walk a called helper's body with its parameters bound to this call's arguments; bind its return."""
        if not isinstance(call.func, ast.Name) or call.func.id not in self._defs:
            return env
        name = call.func.id
        if name in self._active or self._sites.get(name, 0) >= MAX_SITES:
            return env
        self._sites[name] = self._sites.get(name, 0) + 1
        fn, def_env = self._defs[name]
        bound = dict(def_env)
        params = _params(fn)
        for p, arg in zip(params, call.args, strict=False):
            if not isinstance(arg, ast.Starred):
                bound[p] = Binding(arg, env)
        for k in call.keywords:
            if k.arg in params:
                bound[k.arg] = Binding(k.value, env)
        if fn.args.kwarg is not None:  # **extra: the keywords no parameter took, as dict(...)
            extra = [k for k in call.keywords if k.arg is None or k.arg not in params]
            bound[fn.args.kwarg.arg] = Binding(
                ast.Call(func=ast.Name(id="dict", ctx=ast.Load()), args=[], keywords=extra), env)
        returns = self._walk_function(fn, bound, name)
        if not returns:
            return env
        new = dict(env)
        new[call_key(call)] = Binding(*returns[-1])
        return new

    def _walk_function(self, fn, env: Env, name: str | None, keep: bool = True) -> list[tuple[ast.expr, Env]]:
        if self._walks >= MAX_WALKS:
            return []
        self._walks += 1
        env = {k: v for k, v in env.items() if k not in _params(fn)} if name is None else env
        saved = (self.chains, self.calls, self._returns)
        if not keep:
            self.chains, self.calls = [], []
        self._returns = []
        if name:
            self._active.append(name)
        try:
            self._walk(fn.body, env)
            return self._returns
        finally:
            if name:
                self._active.pop()
            self.chains, self.calls, self._returns = saved

    @staticmethod
    def _bind(stmt: ast.stmt, env: Env) -> Env:
        targets: list[ast.expr] = []
        value = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if value is None:
            return env
        new = dict(env)
        for name in names:
            new[name] = Binding(value, env)
        for t in targets:  # d["key"] = value: d becomes {**d_before, "key": value}
            if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in env
                    and _is_mapping(resolve(t.value, env)[0])):
                merged = ast.Dict(keys=[None, t.slice], values=[ast.Name(id=t.value.id, ctx=ast.Load()), value])
                new[t.value.id] = Binding(merged, env)
        return new
