"""What a class statement says about its attributes: settings classes a user reads a trigger or option from.

``settings.interval`` where ``settings = Settings()`` and ``Settings`` is a
dataclass, a ``NamedTuple`` or an attrs class with ``interval: str = "2 seconds"``
stands for ``"2 seconds"`` unless the call passed ``interval`` (by keyword or by
position, in field order). A plain class attribute (``interval = "2 seconds"``) is
read the same way, unless ``__init__`` (or a post-init hook) assigns
``self.interval``: then the value is unknown. Pure AST helpers; following names
and base classes is :mod:`flow`'s job.
"""

from __future__ import annotations

import ast

#: Decorators that make a class a record with generated ``__init__`` (last name of the decorator).
_RECORD_DECORATORS = {"dataclass", "define", "frozen", "mutable", "attrs", "s"}
#: Calls that declare a field with options: ``field(default=...)``, ``attr.ib(default=...)``.
_FIELD_CALLS = {"field", "ib", "attrib"}
#: Methods whose ``self.<name> = ...`` makes an attribute's value unknown to a static reader.
_INIT_METHODS = {"__init__", "__post_init__", "__attrs_post_init__", "__new__"}


def last_name(expr: ast.expr) -> str | None:
    """``f`` / ``mod.f`` -> ``'f'``; None for anything else."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def is_record(cls: ast.ClassDef) -> bool:
    """A dataclass, attrs class or ``typing.NamedTuple``: its ``__init__`` takes the fields in order."""
    if any(last_name(d.func if isinstance(d, ast.Call) else d) in _RECORD_DECORATORS for d in cls.decorator_list):
        return True
    return any(last_name(b) == "NamedTuple" for b in cls.bases)


def _is_classvar(annotation: ast.expr) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return last_name(target) == "ClassVar"


def _is_field_call(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and last_name(value.func) in _FIELD_CALLS


def own_fields(cls: ast.ClassDef) -> list[str]:
    """The record's own fields in declaration order (annotated names, ``attr.ib()`` assignments)."""
    out: list[str] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and not _is_classvar(stmt.annotation):
            name = stmt.target.id
        elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
              and _is_field_call(stmt.value)):
            name = stmt.targets[0].id
        else:
            continue
        if name in out:
            out.remove(name)
        out.append(name)
    return out


def class_value(cls: ast.ClassDef, attr: str) -> tuple[bool, ast.expr | None]:
    """(declared here, value) of ``attr`` in the class body; the value is None when it has none or is not known.

    ``field(default=X)`` / ``attr.ib(default=X)`` give ``X``; ``default_factory=F`` / ``factory=F``
    give the call ``F()``; a method or nested class of that name is not a value.
    """
    declared, value = False, None
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets):
            declared, value = True, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr:
            declared, value = True, stmt.value
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == attr:
            declared, value = True, None
    if _is_field_call(value):
        options = {k.arg: k.value for k in value.keywords if k.arg}
        if "default" in options:
            value = options["default"]
        elif value.args and last_name(value.func) in ("ib", "attrib"):  # attr.ib(default) positionally
            value = value.args[0]
        else:
            factory = options.get("default_factory", options.get("factory"))
            value = ast.Call(func=factory, args=[], keywords=[]) if factory is not None else None
    return declared, value


def set_in_init(cls: ast.ClassDef, attr: str) -> bool:
    """True when ``__init__`` (or a post-init hook) assigns ``self.<attr>`` (its value is then unknown)."""
    for stmt in cls.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or stmt.name not in _INIT_METHODS:
            continue
        for node in ast.walk(stmt):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
            if any(isinstance(t, ast.Attribute) and t.attr == attr for t in targets):
                return True
    return False


def call_argument(call: ast.Call, fields: list[str], attr: str) -> tuple[bool, ast.expr | None]:
    """(known, value) of field ``attr`` as ``call`` passes it: (True, arg), (True, None) if not passed, (False, None) if unknowable."""
    for kw in call.keywords:
        if kw.arg == attr:
            return True, kw.value
    index = fields.index(attr)
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            return False, None
        if i == index:
            return True, arg
    if any(kw.arg is None for kw in call.keywords):  # **mapping may hold it
        return False, None
    return True, None
