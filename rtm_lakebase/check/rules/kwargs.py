"""Keyword arguments of a call with ``**mapping`` resolved: ``.trigger(**t)``, ``.options(**opts)``.

A ``**`` argument is followed through variables (:func:`flow.resolve`) to a
dict literal with string keys or a ``dict(key=value, ...)`` call; later
keys win, as in Python. ``complete`` is False when some ``**`` argument could
not be resolved (a parameter, a function result), so a rule that needs every
key (a missing required option) can stay silent instead of guessing.
"""

from __future__ import annotations

import ast

from rtm_lakebase.check.rules.flow import Env, Link, resolve


def mapping_items(expr: ast.expr, env: Env) -> tuple[list[tuple[str, ast.expr, Env]], bool]:
    """(key, value, env) of a mapping expression; (items, False) when it is not a literal mapping."""
    value, venv = resolve(expr, env)
    if isinstance(value, ast.Dict):
        items: list[tuple[str, ast.expr, Env]] = []
        complete = True
        for k, v in zip(value.keys, value.values, strict=True):
            if k is None:  # {**other}
                sub, ok = mapping_items(v, venv)
                items += sub
                complete = complete and ok
                continue
            key, _ = resolve(k, venv)
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                items.append((key.value, v, venv))
            else:
                complete = False
        return items, complete
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
        items = []
        complete = not value.args
        for arg in value.args:
            sub, ok = mapping_items(arg, venv)
            items += sub
            complete = ok
        for kw in value.keywords:
            if kw.arg is None:
                sub, ok = mapping_items(kw.value, venv)
                items += sub
                complete = complete and ok
            else:
                items.append((kw.arg, kw.value, venv))
        return items, complete
    return [], False


def keywords(link: Link) -> tuple[dict[str, tuple[ast.expr, Env]], bool]:
    """A call link's keyword arguments, ``**`` mappings expanded; (keywords, all resolved)."""
    out: dict[str, tuple[ast.expr, Env]] = {}
    complete = True
    if link.call is None:
        return out, complete
    for kw in link.call.keywords:
        if kw.arg is not None:
            out[kw.arg] = (kw.value, link.env)
            continue
        items, ok = mapping_items(kw.value, link.env)
        complete = complete and ok
        for key, value, env in items:
            out[key] = (value, env)
    return out, complete
