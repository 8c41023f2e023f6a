"""Property-based tests (Hypothesis) of the Markdown scanner: generated documents, not hand-picked ones.

- any text: ``parse`` and every Markdown check end without an exception, and
  every line number they report lies inside the file;
- documents assembled from paragraphs, headings, comments and fences: the
  scanner finds exactly the fences written, at their lines, with their content;
  a fence left open is FENCE002, a comment left open is HTML001;
- heading ids equal Python-Markdown's for the whole page with the site's
  extensions (what MkDocs publishes);
- ``generate`` is a fixed point: rewriting excerpts and generated blocks makes
  the check clean, and a second rewrite changes nothing.
"""

from __future__ import annotations

import re

import markdown
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skillcheck.anchors import anchors
from skillcheck.codeblocks import check_document, check_excerpt
from skillcheck.excerpts import rewrite_excerpts
from skillcheck.generated import Renderer, check_blocks, rewrite
from skillcheck.links import check_links
from skillcheck.markdown import parse
from tests.validator.packbuilder import REPO

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Characters that matter to Markdown, plus letters, digits, spaces and some Unicode.
MD_ALPHABET = st.sampled_from(list("abcXYZ019 \t\n#`~*_-[]()<>!:|>\\\"'.,/=+{}&é中\u00a0"))
md_text = st.text(MD_ALPHABET, max_size=400)

word = st.text(st.sampled_from(list("abcdefghijklmnopqrstuvwxyz")), min_size=1, max_size=8)
inline_text = st.lists(st.one_of(word, st.sampled_from(["`code`", "**bold**", "*em*", "C++", "&", "4.3?", "é", "(x)",
                                                        "a_b", "--", "[link](x.md)", "Ünï"])),
                       min_size=1, max_size=6).map(" ".join)


@SETTINGS
@given(md_text)
def test_any_text_parses_and_checks_without_exceptions(text):
    doc = parse("x.md", text)
    n = max(len(doc.lines), 1)
    for block in doc.blocks:
        assert 1 <= block.start <= block.end <= n + 1
    for item in doc.headings + doc.links:
        assert 1 <= item.line <= n
    found = check_document(doc, lambda rel: None) + check_links(doc, REPO, lambda rel: None)
    assert all(1 <= f.line <= n + 1 and f.col >= 1 for f in found), [f.text() for f in found]


# --- structured documents ---------------------------------------------------------------------

fence_body_line = st.text(st.sampled_from(list("abc xyz=()#`~-*")), max_size=20).filter(
    lambda line: not re.match(r"^\s{0,3}(`{3,}|~{3,})", line))


@st.composite
def fence(draw):
    marker = draw(st.sampled_from(["`", "~"])) * draw(st.integers(3, 5))
    lang = draw(st.sampled_from(["python", "text", "bash", "sql", ""]))
    body = draw(st.lists(fence_body_line, max_size=5))
    return ("fence", marker, lang, body)


element = st.one_of(
    inline_text.map(lambda t: ("para", t)),
    st.tuples(st.integers(1, 6), inline_text).map(lambda t: ("heading", t[0], t[1])),
    word.map(lambda w: ("comment", w)),
    fence(),
)


def assemble(elements) -> tuple[str, list[tuple[str, int, list[str]]]]:
    """Markdown text, and the fences written: (lang, opening line, body)."""
    lines: list[str] = []
    fences = []
    for el in elements:
        if lines:
            lines.append("")
        if el[0] == "para":
            lines.append(el[1])
        elif el[0] == "heading":
            lines.append("#" * el[1] + " " + el[2])
        elif el[0] == "comment":
            lines.append(f"<!-- {el[1]} -->")
        else:
            _, marker, lang, body = el
            fences.append((lang, len(lines) + 1, body))
            lines += [marker + lang, *body, marker]
    return "\n".join(lines) + "\n", fences


@SETTINGS
@given(st.lists(element, max_size=10))
def test_fences_are_found_where_they_were_written(elements):
    text, fences = assemble(elements)
    doc = parse("x.md", text)
    assert [(b.lang, b.start, b.lines) for b in doc.blocks] == fences
    assert all(b.closed for b in doc.blocks)
    codes = {f.code for f in check_document(doc, lambda rel: None)}
    assert "FENCE002" not in codes and "HTML001" not in codes
    assert ("FENCE001" in codes) == any(lang == "" for lang, _, _ in fences)


@SETTINGS
@given(st.lists(element, max_size=6), fence())
def test_a_fence_left_open_is_fence002(elements, last):
    text, _ = assemble(list(elements) + [last])
    text = text[: text.rstrip("\n").rfind("\n") + 1]  # drop the closing fence line
    doc = parse("x.md", text)
    found = [f for f in check_document(doc, lambda rel: None) if f.code == "FENCE002"]
    assert [f.line for f in found] == [doc.blocks[-1].start]


@SETTINGS
@given(st.lists(element, max_size=6), st.text(st.sampled_from(list("abc -<>!")), max_size=30))
def test_a_comment_left_open_is_html001(elements, tail):
    text, _ = assemble(elements)
    tail = tail.replace("-->", "")
    line = len(text.split("\n"))
    doc = parse("x.md", text + "\n<!-- " + tail + "\n")
    assert [f.line for f in check_document(doc, lambda rel: None) if f.code == "HTML001"] == [line + 1]


# --- anchors --------------------------------------------------------------------------------------

def site_ids(text: str) -> set[str]:
    md = markdown.Markdown(extensions=["toc", "admonition", "tables", "pymdownx.highlight", "pymdownx.superfences"],
                           extension_configs={"toc": {"permalink": True}})
    return set(re.findall(r'<h[1-6][^>]*\sid="([^"]*)"', md.convert(text)))


@SETTINGS
@given(st.lists(st.tuples(st.integers(1, 6), inline_text), min_size=1, max_size=8))
def test_heading_ids_equal_the_sites(headings):
    text = "\n\n".join("#" * level + " " + title for level, title in headings) + "\n"
    assert anchors(parse("x.md", text), REPO) == site_ids(text)


# --- generate is a fixed point ------------------------------------------------------------------------

@SETTINGS
@given(st.lists(fence_body_line, min_size=1, max_size=6), st.lists(fence_body_line, max_size=6),
       st.integers(0, 3))  # 4 spaces at the top level would make an indented code block, not a fence
def test_excerpt_rewrite_is_a_fixed_point(region_lines, stale_lines, indent):
    module = "\n".join(['"""M."""', "# --8<-- [start:r]", *region_lines, "# --8<-- [end:r]", ""])
    pad = " " * indent
    text = "\n".join(["# T", "", "Intro.", "", pad + "<!-- excerpt: m.py#r -->", pad + "```python",
                      *[pad + l if l else "" for l in stale_lines], pad + "```", ""])
    read = {"m.py": module}.get
    doc = parse("x.md", text)
    lines, _ = rewrite_excerpts(doc.lines, doc.blocks, read)
    fixed = parse("x.md", "\n".join(lines) + "\n")
    (block,) = fixed.blocks
    assert check_excerpt(block, "x.md", 5, "m.py", "r", read) == []
    again, changed = rewrite_excerpts(fixed.lines, fixed.blocks, read)
    assert changed == 0 and again == fixed.lines


@settings(max_examples=30, deadline=None)
@given(st.lists(fence_body_line, max_size=4), st.booleans())
def test_generated_block_rewrite_is_a_fixed_point(stale, twice):
    text = "# T\n\nIntro.\n\n<!-- generated:foreach-latency -->\n\n" + "\n".join(stale) + \
           "\n\n<!-- /generated:foreach-latency -->\n\nAfter.\n"
    if twice:
        text += "\n<!-- generated:foreach-latency -->\n<!-- /generated:foreach-latency -->\n"
    renderer = Renderer(REPO)
    new, problems = rewrite(text, renderer)
    assert problems == []
    doc = parse("x.md", new)
    assert check_blocks("x.md", doc.lines, renderer, doc.in_code) == []
    assert rewrite(new, renderer)[0] == new
    assert new.endswith("After.\n" + ("\n<!-- generated:foreach-latency -->" if twice else "")) or twice
