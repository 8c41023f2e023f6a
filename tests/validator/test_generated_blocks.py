"""Generated Markdown blocks: one mechanism for every generated table, its markers, write and check."""

from __future__ import annotations

import re
import shutil

from skillcheck.generated import GENERATORS, Renderer, check_blocks, find_blocks, rewrite
from skillcheck.markdown import parse
from skillcheck.packfiles import markdown_files
from skillcheck.regenerate import regenerate_markdown
from tests.validator.packbuilder import REPO

#: A home-made block marker such as <!-- name:start --> / <!-- name:end --> (the pre-mechanism style).
OTHER_MARKER_RE = re.compile(r"^\s*<!--\s*[\w.-]+:(?:start|end|begin)\b[^>]*-->\s*$", re.M)


def test_every_generated_region_in_the_pack_uses_the_shared_markers():
    for rel in markdown_files(REPO):
        text = (REPO / rel).read_text(encoding="utf-8")
        assert not OTHER_MARKER_RE.search(text), f"{rel}: register the block in skillcheck/generated.py instead"


def test_every_registered_generator_is_used_and_renders():
    used = set()
    renderer = Renderer(REPO)
    for rel in markdown_files(REPO):
        doc = parse(rel, (REPO / rel).read_text(encoding="utf-8"))
        spans, problems = find_blocks(rel, doc.lines, doc.in_code)
        assert problems == []
        used |= {s.name for s in spans}
    assert used == set(GENERATORS)
    for name in GENERATORS:
        body, problem = renderer.render(name)
        assert problem is None and body


def test_a_changed_source_makes_every_block_stale_and_generate_fixes_it(tmp_path):
    root = tmp_path / "pack"
    for rel in ("benchmarks/foreach_latency.py", "benchmarks/results/foreach_latency.json", "benchmarks/README.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    source = root / "benchmarks/results/foreach_latency.json"
    source.write_text(source.read_text(encoding="utf-8").replace('"date": "', '"date": "1999-', 1), encoding="utf-8")
    doc = parse("benchmarks/README.md", (root / "benchmarks/README.md").read_text(encoding="utf-8"))
    found = check_blocks("benchmarks/README.md", doc.lines, Renderer(root), doc.in_code)
    assert {f.code for f in found} == {"GEN001", "GEN003"}  # foreach-latency stale; rate-sweep's JSON absent
    changed, problems = regenerate_markdown(root)
    # rate-sweep's JSON is absent: its block cannot render (GEN003), nor can the prose figures quoting it (FIG002)
    assert changed == ["benchmarks/README.md"] and {f.code for f in problems} == {"GEN003", "FIG002"}
    assert "Measured 1999-" in (root / "benchmarks/README.md").read_text(encoding="utf-8")
    assert regenerate_markdown(root)[0] == []


def test_markers_inside_code_blocks_are_examples_not_blocks():
    text = "# T\n\n```text\n<!-- generated:nope -->\n```\n"
    doc = parse("x.md", text)
    assert find_blocks("x.md", doc.lines, doc.in_code) == ([], [])
    assert rewrite(text, Renderer(REPO), skip=doc.in_code)[0] == text


def test_broken_markers_are_gen002():
    cases = {
        "no end": "<!-- generated:foreach-latency -->\n",
        "end only": "<!-- /generated:foreach-latency -->\n",
        "mismatched": "<!-- generated:foreach-latency -->\n<!-- /generated:sink-benchmark -->\n",
        "nested": "<!-- generated:foreach-latency -->\n<!-- generated:sink-benchmark -->\n"
                  "<!-- /generated:sink-benchmark -->\n",
        "unknown": "<!-- generated:nope -->\n<!-- /generated:nope -->\n",
    }
    for what, text in cases.items():
        _, problems = find_blocks("x.md", text.splitlines())
        assert problems and {p.code for p in problems} == {"GEN002"}, what
