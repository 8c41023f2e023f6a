"""Forbidden-pattern rules. Python rules take a parsed module (:class:`flow.Flow`); prose rules take text.

``python_rules(tree, source)`` runs every Python rule and returns findings
with lines relative to the given source.
"""

from __future__ import annotations

import ast

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.rules import continuation, native_sink, realtime, sink, sql
from rtm_lakebase.check.rules.flow import Flow


def python_rules(tree: ast.Module, path: str) -> list[Finding]:
    flow = Flow(tree)
    out: list[Finding] = []
    out += realtime.check(flow, path)
    out += sink.check(tree, path)
    out += sql.check(flow, path)
    out += native_sink.check(flow, path)
    return out


def text_rules(source: str, path: str) -> list[Finding]:
    return continuation.check(source, path)
