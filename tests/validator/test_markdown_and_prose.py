"""Markdown scanning, slugs compatible with Python-Markdown's toc, link resolution and the prose rules."""

from __future__ import annotations

import markdown
import pytest

from rtm_lakebase.check.rules.prose import check_text
from skillcheck.anchors import anchors
from skillcheck.markdown import parse
from tests.validator.packbuilder import REPO

HEADINGS = [
    "Writing the query", "Real-time mode (RTM): set-up", "`foreach` vs. `foreachBatch`",
    "What's new in 4.3?", "Slots = source + shuffle", "Step 1 -- connect", "C++ & Java", "Ünïcödé heading",
    "  Spaces   around  ", "snake_case_name", "Errors: `STREAMING_REAL_TIME_MODE`",
    "The [`foreach`](x.md) **sink**", "A &amp; B <em>html</em>", "Under_scored *emphasis* and _more_",
]


def _rendered_ids(source: str, **toc) -> set[str]:
    """Heading ids of the full document rendered by Python-Markdown with the site's extensions."""
    md = markdown.Markdown(extensions=["toc", "admonition", "tables", "pymdownx.highlight", "pymdownx.superfences"],
                           extension_configs={"toc": {"permalink": True, **toc}})
    html = md.convert(source)
    import re

    return set(re.findall(r'<h[1-6][^>]*\sid="([^"]*)"', html))


def test_heading_ids_match_the_site_renderer():
    source = "\n\n".join(f"## {h}" for h in HEADINGS + ["Writing the query", "Writing the query"]) + "\n"
    ids = anchors(parse("x.md", source), REPO)
    assert ids == _rendered_ids(source)
    assert {"writing-the-query_1", "writing-the-query_2", "the-foreach-sink"} <= ids


def test_heading_ids_follow_the_sites_toc_config(tmp_path):
    (tmp_path / "mkdocs.yml").write_text("site_name: x\nmarkdown_extensions:\n  - toc:\n      separator: _\n",
                                         encoding="utf-8")
    source = "# Two Words\n\n## Two Words\n"
    assert anchors(parse("x.md", source), tmp_path) == {"two_words", "two_words_1"}


def test_real_reference_anchors_equal_mkdocs_rendering():
    """Every reference's anchors, computed by the validator, equal Python-Markdown's ids for the full page."""
    for path in sorted((REPO / "references").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        assert anchors(parse(path.name, text), REPO) >= _rendered_ids(text), path.name


def test_fences_tags_comments_and_indented_blocks():
    doc = parse("x.md", "\n".join([
        "# T", "", "<!-- skills: allow RTM001 -- demo -->", "```python", "x = 1", "```", "",
        "1. Step", "", "    ```bash", "    echo hi", "    ```", "", "~~~", "plain", "~~~", "",
    ]))
    assert [(b.lang, b.start, b.lines) for b in doc.blocks] == [
        ("python", 4, ["x = 1"]), ("bash", 10, ["echo hi"]), ("", 14, ["plain"])]
    assert doc.blocks[0].comments == [(3, "skills: allow RTM001 -- demo")]
    assert doc.blocks[1].indent == 4
    assert all(b.closed for b in doc.blocks)


def test_unclosed_fence_and_comment_are_seen():
    doc = parse("x.md", "# T\n\n- item\n\n  ```python\n  x = 1\n\nafter the list\n\n````text\nopen\n```\n")
    assert [(b.start, b.closed) for b in doc.blocks] == [(5, False), (10, False)]
    doc = parse("x.md", "# T\n\nText <!-- open\n\n<!-- closed -->\n\n<!--\nnever closed\n")
    # Inline, an unclosed '<!--' renders as literal text; as a block it hides the rest of the page on GitHub.
    assert doc.unclosed_comments == [3, 7]
    assert parse("x.md", "# T\n\nSee `<!--` in code.\n").unclosed_comments == []


def test_links_skip_code_spans_and_fences():
    doc = parse("x.md", "See [a](a.md) and `[b](b.md)`.\n\n```text\n[c](c.md)\n```\n\n[ref]: d.md#x\n")
    assert [(l.target, l.line) for l in doc.links] == [("a.md", 1), ("d.md#x", 7)]


def test_escaped_brackets_and_html_are_not_links():
    doc = parse("x.md", "Not \\[a](a.md) a link.\n\n<div>[b](b.md)</div>\n")
    assert doc.links == []


def test_headings_inside_fences_are_not_anchors():
    doc = parse("x.md", "# Title\n\n```bash\n# not a heading\n```\n")
    assert anchors(doc) == {"title"}


def prose(text: str) -> set[str]:
    return {f.code for f in check_text([(1, 0, text)], "x.md")}


@pytest.mark.parametrize("text,code", [
    ("Enable Photon for real-time mode.", "PROSE001"),
    ("Real-time mode requires Photon.", "PROSE001"),
    ("Photon is required for real-time queries.", "PROSE001"),
    ("Run it on a Photon-enabled cluster.", "PROSE001"),
    ("Use DBR 13.3 or later.", "PROSE002"),
    ("Available from Databricks Runtime 13.3 LTS.", "PROSE002"),
    ("Latency stays < 800 ms.", "PROSE003"),
    ("Expect 800ms end to end.", "PROSE003"),
    ("Latency is sub-800 ms.", "PROSE003"),
    ("Call .trigger(realTime=True) to start.", "PROSE004"),
])
def test_prose_claims_are_flagged(text, code):
    assert code in prose(text)


@pytest.mark.parametrize("text", [
    "Photon must be OFF for real-time mode.",
    "Disable Photon on the real-time cluster.",
    "Real-time mode does not need Photon.",
    "Photon is not required.",
    "Turn Photon off; autoscaling and spot instances too.",
    "Real-time mode needs Databricks Runtime 16.4 LTS or later.",
    "Older pages claim DBR 13.3, which is wrong.",
    "The p95 was 810 ms in micro-batch.",
    "Passing realTime=True raises PySparkValueError.",
    "Never write realTime=True; pass a duration string.",
    "Photon and real-time mode: see the set-up page.",
])
def test_prose_corrections_are_not_flagged(text):
    assert prose(text) == set()


def test_prose_rule_reports_the_right_line():
    findings = check_text([(10, 0, "First line is fine."), (11, 0, "Then enable Photon.")], "x.md")
    assert [(f.code, f.line) for f in findings] == [("PROSE001", 11)]


def test_multiline_html_comment_is_not_prose():
    doc = parse("x.md", "# T\n\n<!--\nEnable Photon [x](gone.md)\n-->\n\nReal text.\n")
    assert [l for p in doc.paragraphs for _, l in p.lines] == ["# T", "Real text."]
    assert doc.links == []


def test_routing_table_comes_from_table_tokens():
    from skillcheck.routing import routes

    text = "\n".join([
        "# Skill", "", "```text", "| Reference | Read when |", "| --- | --- |", "| [X](references/x.md) | fenced |", "```", "",
        "| Reference | Read when |", "| --- | --- |",
        "| [Guide](references/guide.md) | Writing `a \\| b` queries \\| pipes. |",  # GFM: escape '|' even in code
        "| [Other](references/other.md#part) | |", "",
    ])
    found, has_table = routes(parse("SKILL.md", text))
    assert has_table
    assert [(r.reference, r.read_when, r.line) for r in found] == [
        ("references/guide.md", "Writing `a | b` queries | pipes.", 11), ("references/other.md", "", 12)]
