"""The checker resolves values the way users write them: one class of shapes, each wrong and right.

Every case is a small user file in a realistic shape (trigger or options in a
dict, merged dicts, item assignment, ``**kwargs`` passed through helpers,
builder functions, writers reassigned step by step). The wrong version must
raise exactly the expected codes; the corrected version must raise nothing.
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from rtm_lakebase.check.files import check_paths
from rtm_lakebase.check.rules import python_rules

W = 'df.writeStream.foreach(w).outputMode("update")'
SINK = 'df.writeStream.format("postgresql").outputMode("update")'

#: name -> (code template with {v} for the variable part, wrong value, right value, expected codes)
SHAPES = {
    "dict literal": ('t = {{"realTime": {v}}}\n' + W + '.trigger(**t).start()\n',
                     '"1 second"', '"1 minute"', {"RTM002"}),
    "dict() call": ('t = dict(realTime={v})\n' + W + '.trigger(**t).start()\n',
                    'True', '"5 minutes"', {"RTM001"}),
    "merged dicts": ('base = {{"realTime": "5 minutes"}}\nt = {{**base, "realTime": {v}}}\n'
                     + W + '.trigger(**t).start()\n', '"2 seconds"', '"30 seconds"', {"RTM002"}),
    "item assignment": ('t = {{}}\nt["realTime"] = {v}\n' + W + '.trigger(**t).start()\n',
                        '"500 milliseconds"', '"10 seconds"', {"RTM002"}),
    "builder returns the dict": ('def rt():\n    return {{"realTime": {v}}}\n\n' + W + '.trigger(**rt()).start()\n',
                                 '"1 second"', '"1 minute"', {"RTM002"}),
    "**kwargs passed through": ('def start(df, w, **trigger):\n'
                                '    return df.writeStream.foreach(w).outputMode("update").trigger(**trigger).start()\n\n'
                                'start(df, w, realTime={v})\n', '"1 second"', '"1 minute"', {"RTM002"}),
    "reassigned writer, dict trigger": ('t = {{"realTime": "1 minute"}}\nq = df.writeStream\nq = q.{v}(w)\n'
                                        'q = q.outputMode("update")\nq = q.trigger(**t)\nq.start()\n',
                                        'foreachBatch', 'foreach', {"RTM003"}),
    "output mode in start(**kwargs)": ('s = {{"outputMode": {v}}}\n'
                                       'df.writeStream.foreach(w).trigger(**{{"realTime": "1 minute"}}).start(**s)\n',
                                       '"append"', '"update"', {"RTM004"}),
    "sink options dict": ('opts = {{"endpoint": "p.b.e", "dbtable": "s.t", "batchinterval": {v}}}\n'
                          + SINK + '.options(**opts).trigger(realTime="5 minutes").start()\n',
                          '"100 ms"', '"100 milliseconds"', {"LBS003"}),
    "sink option key in a variable": ('k = {v}\n' + SINK + '.option("endpoint", "p.b.e").option("dbtable", "s.t")'
                                      '.option(k, "id").trigger(realTime="5 minutes").start()\n',
                                      '"primary_key"', '"upsertkey"', {"LBS001"}),
    "sink options from a builder with **extra": ('BASE = {{"endpoint": "p.b.e", "dbtable": "s.t"}}\n'
                                                 'def opts(**extra):\n    return dict(BASE, **extra)\n\n'
                                                 + SINK + '.options(**opts({v}="x")).trigger(realTime="5 minutes").start()\n',
                                                 'password', 'upsertkey', {"LBS001"}),
    "sink without a table": ('o = {{"endpoint": "p.b.e", {v}: "s.t"}}\n' + SINK
                             + '.options(**o).trigger(realTime="5 minutes").start()\n',
                             '"table"', '"dbtable"', {"LBS001", "LBS002"}),
}


def codes(source: str) -> set[str]:
    return {f.code for f in python_rules(ast.parse(source), "user.py")}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_wrong_shape_is_caught(name):
    template, wrong, _right, expected = SHAPES[name]
    assert codes(template.format(v=wrong)) == expected


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_corrected_shape_is_clean(name):
    template, _wrong, right, _expected = SHAPES[name]
    assert codes(template.format(v=right)) == set()


def test_unresolvable_options_raise_no_missing_key_finding():
    # The options come from a parameter: the checker cannot know them, so it does not claim one is missing.
    src = "def start(df, opts):\n    return " + SINK + '.options(**opts).trigger(realTime="5 minutes").start()\n'
    assert codes(src) == set()


def _notebook(cells: list[str]) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": textwrap.dedent(c)} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize("value,expected", [('"1 second"', {"RTM002"}), ('"1 minute"', set())])
def test_notebook_dict_trigger_across_cells(tmp_path, value, expected):
    nb = tmp_path / "stream.ipynb"
    nb.write_text(_notebook([
        "trigger = {\"realTime\": " + value + "}\nsink = {\"endpoint\": \"p.b.e\", \"dbtable\": \"s.t\"}\n",
        "w = df.writeStream.format(\"postgresql\").outputMode(\"update\")\nw = w.options(**sink)\n",
        "w.trigger(**trigger).start()\n",
    ]), encoding="utf-8")
    findings, _checked = check_paths([str(nb)])
    assert {f.code for f in findings} == expected
