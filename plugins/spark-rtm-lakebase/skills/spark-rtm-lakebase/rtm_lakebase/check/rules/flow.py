"""Statement-ordered view of a Python module: method chains with simple variable aliases resolved.

``q = df.writeStream; q = q.trigger(realTime=t)`` yields one chain
``df.writeStream.trigger(...)`` whose ``realTime`` argument resolves ``t`` to
the string assigned before. Scopes are not modelled (one flat namespace,
last assignment wins), which is what short snippets and example modules need.

Helper functions are followed too (user code builds a query in one function
and starts it in another): a call ``build(spark)`` to a function defined in
the module stands for the expression its last ``return`` gives, and a
function called in the module is walked once per call site (up to
``MAX_SITES``) with its parameters bound to that call's arguments (defaults
for the ones it leaves out); an ``if`` whose test those arguments decide runs
only its taken branch, and a ``return`` ends its block. A function never called
in the module (an entry point) is walked with unbound parameters.

Values are followed through settings objects as well: ``settings.interval``
where ``settings = Settings(...)`` is a dataclass, ``NamedTuple`` or attrs
class reads the argument given for that field or its default, a plain class
attribute, or an attribute assigned later (``settings.interval = ...``); see
:mod:`records`. Every resolution spends from one step budget (``MAX_DEPTH``
steps, nested look-ups included), so self-referencing or recursive input ends
as "unknown", never as a recursion error or a hang.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from rtm_lakebase.check.rules import records

MAX_DEPTH = 40
#: Call sites per helper function walked with bound parameters, and total body walks per module.
MAX_SITES = 8
MAX_WALKS = 400
#: Env key under which a helper function's return expression is bound: ``RETURNS + name``.
RETURNS = "()"
#: Env key under which a class statement is bound: ``CLASS + name`` (its attributes are read by :mod:`records`).
CLASS = "class "


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
    """Follow ``Name`` bindings (and helper returns, settings attributes, decided ``x if c else y``) to a value."""
    return _resolve(expr, env, _Budget(MAX_DEPTH - depth))


class _Budget:
    """Steps one resolution may take in all (nested look-ups included), so hostile input stays linear."""

    __slots__ = ("left",)

    def __init__(self, steps: int):
        self.left = steps

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


def _resolve(expr: ast.expr, env: Env, budget: _Budget) -> tuple[ast.expr, Env]:
    while True:
        b = _follow(expr, env, budget)
        if b is None:
            return expr, env
        expr, env = b.expr, b.env


def _follow(expr: ast.expr, env: Env, budget: _Budget) -> Binding | None:
    """One step: what ``expr`` stands for, or None (unknown, or a value already)."""
    if not budget.take():
        return None
    if isinstance(expr, ast.Name):
        return env.get(expr.id)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        # this very call, walked with its arguments bound; else the helper's return walked unbound
        return env.get(call_key(expr)) or env.get(RETURNS + expr.func.id)
    if isinstance(expr, ast.Attribute):
        return _attribute(expr, env, budget)
    if isinstance(expr, ast.IfExp):
        test, _ = _resolve(expr.test, env, budget)
        if isinstance(test, ast.Constant):
            return Binding(expr.body if test.value else expr.orelse, env)
    return None


def _attribute(expr: ast.Attribute, env: Env, budget: _Budget) -> Binding | None:
    """``obj.attr``: an attribute assigned in the module, or a settings class's field or class attribute."""
    if isinstance(expr.value, ast.Name) and f"{expr.value.id}.{expr.attr}" in env:
        return env[f"{expr.value.id}.{expr.attr}"]
    receiver, renv = _resolve(expr.value, env, budget)
    if isinstance(receiver, ast.Name) and CLASS + receiver.id in renv:  # Settings.interval
        return _class_attribute(renv[CLASS + receiver.id], expr.attr, budget)
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and CLASS + receiver.func.id in renv:
        cls = renv[CLASS + receiver.func.id]  # Settings(...).interval
        return _instance_attribute(cls, receiver, renv, expr.attr, budget)
    return None


def _bases(cls: Binding, budget: _Budget) -> list[Binding]:
    out = []
    for base in cls.expr.bases:
        name, benv = _resolve(base, cls.env, budget)
        if isinstance(name, ast.Name) and CLASS + name.id in benv:
            out.append(benv[CLASS + name.id])
    return out


def _class_attribute(cls: Binding, attr: str, budget: _Budget) -> Binding | None:
    """The value the class body (or the first base class declaring it) gives ``attr``."""
    if not budget.take():
        return None
    declared, value = records.class_value(cls.expr, attr)
    if declared:
        return Binding(value, cls.env) if value is not None else None
    for base in _bases(cls, budget):
        found = _class_attribute(base, attr, budget)
        if found is not None:
            return found
    return None


def _record_fields(cls: Binding, budget: _Budget) -> list[str]:
    """Fields in ``__init__`` order: base records' first, as dataclasses and attrs order them."""
    if not budget.take():
        return []
    out: list[str] = []
    for base in reversed(_bases(cls, budget)):
        if records.is_record(base.expr):
            out += [f for f in _record_fields(base, budget) if f not in out]
    own = records.own_fields(cls.expr)
    return [f for f in out if f not in own] + own


def _instance_attribute(cls: Binding, call: ast.Call, call_env: Env, attr: str, budget: _Budget) -> Binding | None:
    """``Settings(...).attr``: the argument given for that field, else its default; unknown if ``__init__`` sets it."""
    if records.is_record(cls.expr):
        fields = _record_fields(cls, budget)
        if attr in fields:
            known, value = records.call_argument(call, fields, attr)
            if not known:
                return None
            if value is not None:
                return Binding(value, call_env)
    chain = [cls]
    while chain and budget.take():  # any class in the hierarchy whose __init__ assigns it: unknown
        current = chain.pop()
        if records.set_in_init(current.expr, attr):
            return None
        chain += _bases(current, budget)
    return _class_attribute(cls, attr, budget)


def call_key(call: ast.Call) -> str:
    """Env key of one call site's return (set where the helper was walked with that call's arguments)."""
    return f"{RETURNS}@{id(call)}"


def flatten(expr: ast.expr, env: Env, depth: int = 0) -> Chain:
    if depth > MAX_DEPTH:
        return Chain(expr, env)
    b = _follow(expr, env, _Budget(MAX_DEPTH))
    if b is not None:
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
    return records.last_name(call.func) if isinstance(call, ast.Call) else None


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
    """Every name the function's parameters bind (positional, keyword-only, ``*args``, ``**kwargs``)."""
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if p is not None]


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
        self._ended = False  # a return (or raise) ended the block being walked
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
                env = {k: v for k, v in env.items() if k != stmt.name and not k.startswith(stmt.name + ".")}
                env[CLASS + stmt.name] = Binding(stmt, env)  # type: ignore[arg-type]  (read by records)
                continue
            if isinstance(stmt, ast.Return) or (isinstance(stmt, ast.Raise) and self._returns is not None):
                self._ended = True  # the rest of this block never runs
                break
            taken = self._branch_taken(stmt, env)
            if taken is not None:  # `if <constant>:` as a call's arguments decide it: only that branch runs
                env = self._walk(taken, env)
                if self._ended:
                    break
                continue
            for sub in _child_bodies(stmt):
                env = self._walk(sub, env)
                self._ended = False  # a return inside a loop, try or undecided if may not run
            env = self._bind(stmt, env)
        return env

    @staticmethod
    def _branch_taken(stmt: ast.stmt, env: Env) -> list[ast.stmt] | None:
        if not isinstance(stmt, ast.If):
            return None
        test, _ = resolve(stmt.test, env)
        if not isinstance(test, ast.Constant):
            return None
        return stmt.body if test.value else stmt.orelse

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
        a = fn.args
        positional = [p.arg for p in a.posonlyargs + a.args]
        params = positional + [p.arg for p in a.kwonlyargs]
        defaults = list(zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True))
        defaults += [(p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
        for p, default in defaults:  # what the call leaves out keeps its default
            bound[p] = Binding(default, def_env)
        for p, arg in zip(positional, call.args, strict=False):
            if isinstance(arg, ast.Starred):
                break
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
        saved = (self.chains, self.calls, self._returns, self._ended)
        if not keep:
            self.chains, self.calls = [], []
        self._returns, self._ended = [], False
        if name:
            self._active.append(name)
        try:
            self._walk(fn.body, env)
            return self._returns
        finally:
            if name:
                self._active.pop()
            self.chains, self.calls, self._returns, self._ended = saved

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
        for name in names:  # a new object: attributes set on the old one no longer apply, nor a class of that name
            for key in [k for k in new if k.startswith(name + ".") or k == CLASS + name]:
                del new[key]
            new[name] = Binding(value, env)
        for t in targets:  # settings.interval = value: read back by `settings.interval` while settings is unchanged
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                new[f"{t.value.id}.{t.attr}"] = Binding(value, env)
        for t in targets:  # d["key"] = value: d becomes {**d_before, "key": value}
            if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in env
                    and _is_mapping(resolve(t.value, env)[0])):
                merged = ast.Dict(keys=[None, t.slice], values=[ast.Name(id=t.value.id, ctx=ast.Load()), value])
                new[t.value.id] = Binding(merged, env)
        return new
