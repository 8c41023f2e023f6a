"""Figures in prose: markers, pointers, formats, the rewrite, and the pack's own figures against their files."""

from __future__ import annotations

import json

import pytest

from skillcheck.figures import FigureError, Sources, check_figures, find_figures, render, resolve, rewrite_figures
from skillcheck.markdown import parse
from skillcheck.packfiles import markdown_files
from tests.validator.packbuilder import REPO

DATA = {"points": [{"path": "rtm-jvm", "rate": 1000, "visible": {"p50": 22}},
                   {"path": "rtm-jvm", "rate": 50, "visible": {"p50": 18}},
                   {"path": "rtm-python", "rate": 1000, "visible": {"p50": 1287}}],
        "a/b": {"x~y": 0.29}, "flag": True, "rows": 900000}


def _pack(tmp_path, text: str):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "b.json").write_text(json.dumps(DATA), encoding="utf-8")
    return Sources(tmp_path), text


def test_pointer_steps_and_selectors():
    assert resolve(DATA, "/points[path=rtm-jvm,rate=50]/visible/p50") == 18
    assert resolve(DATA, "/points/2/visible/p50") == 1287
    assert resolve(DATA, "/a~1b/x~0y") == 0.29
    for bad in ("/points[path=rtm-jvm]/visible/p50",  # two match
                "/points[path=none]/visible", "/points/9", "/nokey", "points", "/rows/x", "/points[rate]"):
        with pytest.raises(FigureError):
            resolve(DATA, bad)


def test_formats():
    assert render(900000, None) == "900,000"
    assert render(2459.0, None) == "2,459"
    assert render(0.29, None) == "0.29"
    assert render(1287, "/1000:.1f") == "1.3"
    assert render(0.5, "*100:.0f") == "50"
    assert render(3.14159, ":.2f") == "3.14"
    for value, fmt in ((True, None), ("12", None), (None, None), (1, "%5"), (1, "/0"), (1, ":q")):
        with pytest.raises(FigureError):
            render(value, fmt)


def test_check_and_rewrite_round_trip(tmp_path):
    sources, text = _pack(tmp_path, (
        "# T\n\nJVM <!-- fig: b.json#/points[path=rtm-jvm,rate=1000]/visible/p50 -->16 ms, "
        "Python <!-- fig: b.json#/points[path=rtm-python,rate=1000]/visible/p50 /1000:.1f -->1.3 s, "
        "rows <!-- fig: b.json#/rows -->, flag <!-- fig: b.json#/flag -->1.\n"
        "\n```text\n<!-- fig: b.json#/nothing -->5\n```\n"))
    doc = parse("x.md", text)
    found = check_figures("x.md", doc.lines, sources, doc.in_code)
    assert [(f.code, f.line) for f in found] == [("FIG001", 3), ("FIG002", 3), ("FIG002", 3)]
    assert "16 differs" in found[0].message and "renders 22" in found[0].message
    new, problems = rewrite_figures(text, sources, doc.in_code)
    assert [p.code for p in problems] == ["FIG002"]  # the boolean stays a finding; the fence is left alone
    assert "-->22 ms" in new and "-->1.3 s" in new and "-->900,000," in new and "nothing -->5" in new
    doc = parse("x.md", new)
    assert [f.code for f in check_figures("x.md", doc.lines, sources, doc.in_code)] == ["FIG002"]


def test_number_stops_before_punctuation_and_ranges():
    figs = find_figures(["a <!-- fig: b.json#/x -->16, b <!-- fig: b.json#/y -->6–7 ms, c <!-- fig: b.json#/z -->2,459."])
    assert [f.value for f in figs] == ["16", "6", "2,459"]


def test_markers_in_code_spans_are_examples():
    line = "write `<!-- fig: FILE.json#/pointer -->NUMBER` or ``<!-- fig: x.json#/y -->1``; real <!-- fig: b.json#/z -->3"
    figs = find_figures([line])
    assert [(f.file, f.value) for f in figs] == [("b.json", "3")]


def test_missing_or_broken_source_is_fig002(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "bad.json").write_text("{", encoding="utf-8")
    lines = ["<!-- fig: none.json#/x -->1", "<!-- fig: bad.json#/x -->1", "<!-- fig: ../../etc/x.json#/x -->1"]
    found = check_figures("x.md", lines, Sources(tmp_path))
    assert [f.code for f in found] == ["FIG002"] * 3


def test_every_figure_in_the_pack_matches_its_file():
    """The pack's own prose: every marked figure renders from a committed file and equals it."""
    sources = Sources(REPO)
    total = 0
    for rel in markdown_files(REPO):
        doc = parse(rel, (REPO / rel).read_text(encoding="utf-8"))
        total += len(find_figures(doc.lines, doc.in_code))
        assert check_figures(rel, doc.lines, sources, doc.in_code) == []
    assert total >= 40  # the measured figures of SKILL.md, references/ and README.md are marked
