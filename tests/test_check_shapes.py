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
    # Values that come back from a helper: its argument, a branch its argument picks, its parameter's default.
    "helper spreads its argument": ('def trigger_options(real_time):\n    return {{"realTime": real_time}}\n\n'
                                    + W + '.trigger(**trigger_options({v})).start()\n', 'True', '"5 minutes"', {"RTM001"}),
    "helper's if-branch": ('def trigger_options(real_time):\n    if real_time:\n        return {{"realTime": {v}}}\n'
                           '    return {{"processingTime": "0 seconds"}}\n\n' + W + '.trigger(**trigger_options(True)).start()\n',
                           'real_time', '"5 minutes"', {"RTM001"}),
    "helper's conditional expression": ('def interval(fast):\n    return {v} if fast else "1 minute"\n\n'
                                        + W + '.trigger(realTime=interval(True)).start()\n', '"2 seconds"', '"10 seconds"',
                                        {"RTM002"}),
    "helper's parameter default": ('def trigger_options(*, interval={v}):\n    return dict(realTime=interval)\n\n'
                                   + W + '.trigger(**trigger_options()).start()\n', '"2 seconds"', '"1 minute"', {"RTM002"}),
    "realTime=helper()": ('def interval():\n    value = {v}\n    return value\n\n' + W + '.trigger(realTime=interval()).start()\n',
                          '"1 second"', '"1 minute"', {"RTM002"}),
    # Values read from a settings object: field defaults, arguments, class attributes, assigned attributes.
    "dataclass field default": ('from dataclasses import dataclass\n\n@dataclass\nclass Settings:\n    interval: str = {v}\n\n'
                                'settings = Settings()\n' + W + '.trigger(realTime=settings.interval).start()\n',
                                '"2 seconds"', '"1 minute"', {"RTM002"}),
    "dataclass field(default=...)": ('import dataclasses\n\n@dataclasses.dataclass(frozen=True)\nclass Settings:\n'
                                     '    interval: str = dataclasses.field(default={v})\n\n'
                                     + W + '.trigger(realTime=Settings().interval).start()\n', '"2 seconds"', '"1 minute"',
                                     {"RTM002"}),
    "dataclass argument over the default": ('from dataclasses import dataclass\n\n@dataclass\nclass Settings:\n'
                                            '    checkpoint: str\n    interval: str = "1 minute"\n\n'
                                            'settings = Settings("/tmp/cp", {v})\n'
                                            + W + '.trigger(realTime=settings.interval).start()\n',
                                            '"500 milliseconds"', '"30 seconds"', {"RTM002"}),
    "inherited dataclass default": ('from dataclasses import dataclass\n\n@dataclass\nclass Base:\n    interval: str = {v}\n\n'
                                    '@dataclass\nclass Settings(Base):\n    name: str = "orders"\n\n'
                                    'cfg = Settings(name="payments")\n' + W + '.trigger(realTime=cfg.interval).start()\n',
                                    '"1 second"', '"1 minute"', {"RTM002"}),
    "nested settings (default_factory)": ('from dataclasses import dataclass, field\n\n@dataclass\nclass Trigger:\n'
                                          '    interval: str = {v}\n\n@dataclass\nclass Settings:\n'
                                          '    trigger: Trigger = field(default_factory=Trigger)\n\n'
                                          'cfg = Settings()\n' + W + '.trigger(realTime=cfg.trigger.interval).start()\n',
                                          '"1 second"', '"1 minute"', {"RTM002"}),
    "NamedTuple default": ('from typing import NamedTuple\n\nclass Settings(NamedTuple):\n    table: str = "t"\n'
                           '    interval: str = {v}\n\n' + W + '.trigger(realTime=Settings("events").interval).start()\n',
                           '"2 seconds"', '"1 minute"', {"RTM002"}),
    "attrs define default": ('import attrs\n\n@attrs.define\nclass Settings:\n    interval: str = {v}\n\n'
                             'settings = Settings()\n' + W + '.trigger(realTime=settings.interval).start()\n',
                             '"2 seconds"', '"1 minute"', {"RTM002"}),
    "attr.ib default": ('import attr\n\n@attr.s\nclass Settings:\n    interval = attr.ib(default={v})\n\n'
                        + W + '.trigger(**{{"realTime": Settings().interval}}).start()\n', '"2 seconds"', '"1 minute"',
                        {"RTM002"}),
    "class attribute": ('class Settings:\n    INTERVAL = {v}\n\n' + W + '.trigger(realTime=Settings.INTERVAL).start()\n',
                        '"2 seconds"', '"1 minute"', {"RTM002"}),
    "class attribute through an instance": ('class Settings:\n    interval = {v}\n\n    def table(self):\n        return "t"\n\n'
                                            'cfg = Settings()\n' + W + '.trigger(realTime=cfg.interval).start()\n',
                                            'True', '"1 minute"', {"RTM001"}),
    "attribute assigned after creation": ('class Settings:\n    interval = "1 minute"\n\ncfg = Settings()\ncfg.interval = {v}\n'
                                          + W + '.trigger(realTime=cfg.interval).start()\n', '"1 second"', '"2 minutes"',
                                          {"RTM002"}),
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


# --- values the checker cannot know stay unknown (no finding), and hostile shapes stay bounded -------------------

UNKNOWN = {
    "__init__ sets the attribute": ('class Settings:\n    interval = "2 seconds"\n\n    def __init__(self, interval):\n'
                                    '        self.interval = interval\n\n'
                                    'cfg = Settings(read_interval())\n' + W + '.trigger(realTime=cfg.interval).start()\n'),
    "dataclass fields from **mapping": ('from dataclasses import dataclass\n\n@dataclass\nclass Settings:\n'
                                        '    interval: str = "2 seconds"\n\ncfg = Settings(**load())\n'
                                        + W + '.trigger(realTime=cfg.interval).start()\n'),
    "a right argument over a wrong default": ('from dataclasses import dataclass\n\n@dataclass\nclass Settings:\n'
                                              '    interval: str = "2 seconds"\n\ncfg = Settings(interval="1 minute")\n'
                                              + W + '.trigger(realTime=cfg.interval).start()\n'),
    "helper branch on an unknown value": ('def interval(env):\n    if env == "prod":\n        return "1 minute"\n'
                                          '    return "5 minutes"\n\n' + W + '.trigger(realTime=interval(ENV)).start()\n'),
    "settings object rebound": ('class Settings:\n    interval = "1 minute"\n\ncfg = Settings()\ncfg.interval = "1 second"\n'
                                'cfg = Settings()\n' + W + '.trigger(realTime=cfg.interval).start()\n'),
    "default_factory with no default": ('from dataclasses import dataclass, field\n\n@dataclass\nclass Settings:\n'
                                        '    interval: str = field(default_factory=read_interval)\n\n'
                                        + W + '.trigger(realTime=Settings().interval).start()\n'),
}


@pytest.mark.parametrize("name", sorted(UNKNOWN))
def test_values_the_checker_cannot_know_raise_nothing(name):
    assert codes(UNKNOWN[name]) == set()


HOSTILE = {
    "self-recursive helper": 'def opts(x):\n    return opts(x)\n\n' + W + '.trigger(**opts(True)).start()\n',
    "mutually recursive helpers": ('def a(x):\n    return b(x)\n\ndef b(x):\n    return a(x)\n\n'
                                   + W + '.trigger(realTime=a("1 second")).start()\n'),
    "helper returning itself called": 'def f():\n    return f()\n\nt = f()\n' + W + '.trigger(**t).start()\n',
    "class inheriting itself": ('class S(S):\n    pass\n\n' + W + '.trigger(realTime=S.interval).start()\n'),
    "classes reading each other": ('class A:\n    x = B.x\n\nclass B(A):\n    x = A.x\n\n'
                                   + W + '.trigger(realTime=B().x).start()\n'),
    "self-referencing attribute": 'cfg = cfg.cfg\ncfg.cfg = cfg\n' + W + '.trigger(realTime=cfg.cfg.cfg.x).start()\n',
    "fan-out of helpers": "".join(f'def h{i}(x):\n    return h{i + 1}(x) if x else h{i + 1}(x)\n\n' for i in range(60))
                          + 'def h60(x):\n    return x\n\n' + W + '.trigger(realTime=h0("1 second")).start()\n',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_shapes_finish_quickly(name):
    # Bounded by steps, not by time: each returns; a missing bound shows as a RecursionError or a hang.
    codes(HOSTILE[name])


def test_deeply_nested_code_is_bounded():
    # 90 nested ifs around a settings read 300 attributes deep: parsed, walked and resolved without recursion errors.
    body = 'class S:\n    x = "1 second"\n\n'
    indent = ""
    for i in range(90):
        body += f"{indent}if c{i}:\n"
        indent += " "
    chain = "S()" + ".x" * 300
    body += f"{indent}{W}.trigger(realTime={chain}).start()\n"
    codes(body)
    nested_settings = 'class S0:\n    x = "1 second"\n\n' + "".join(
        f"class S{i}:\n    x = S{i - 1}.x\n\n" for i in range(1, 200)) + W + ".trigger(realTime=S199.x).start()\n"
    # 199 classes each reading the previous one: past the step limit the value is unknown, never a crash.
    assert codes(nested_settings) <= {"RTM002"}
    short = 'class S0:\n    x = "1 second"\n\n' + "".join(
        f"class S{i}:\n    x = S{i - 1}.x\n\n" for i in range(1, 5)) + W + ".trigger(realTime=S4.x).start()\n"
    assert codes(short) == {"RTM002"}
