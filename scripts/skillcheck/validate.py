"""Run every check on a pack root and return sorted findings (the `validate` command)."""

from __future__ import annotations

import os
from pathlib import Path

from rtm_lakebase.check.findings import Finding, capped, unique_sorted

from .codeblocks import check_document, check_module
from .figures import Sources, check_figures
from .frontmatter import check_front_matter, parse_front_matter, read_install_name
from .generated import Renderer, check_blocks
from .limits import MAX_FINDINGS_PER_FILE, MAX_HEADINGS
from .links import check_links
from .manifest import check_manifest, read_text
from .markdown import Document, parse
from .packfiles import markdown_files, pack_files
from .routing import check_routing


class Pack:
    """Cached access to the pack's text files; read problems become PACK002 findings once."""

    def __init__(self, root: Path):
        self.root = root
        self.findings: list[Finding] = []
        self._text: dict[str, str | None] = {}
        self._docs: dict[str, Document | None] = {}

    def text(self, rel: str) -> str | None:
        if rel not in self._text:
            text, err = read_text(self.root, rel)
            if err:
                self.findings.append(err)
            self._text[rel] = text
        return self._text[rel]

    def module_text(self, rel: str) -> str | None:
        try:
            if not os.path.lexists(self.root / rel):
                return None
        except (OSError, ValueError):  # a name no file system accepts (NUL, too long): no such module
            return None
        return self.text(rel)

    def doc(self, rel: str) -> Document | None:
        if rel not in self._docs:
            text = self.text(rel)
            self._docs[rel] = parse(rel, text) if text is not None else None
        return self._docs[rel]


def check_reference_shape(doc: Document) -> list[Finding]:
    """REF001: '# Title' (ATX H1) on line 1, then after a blank line a summary paragraph."""
    lines = doc.lines
    if (not lines or not lines[0].startswith("# ") or not lines[0][2:].strip()
            or doc.first_block != "heading_open" or not doc.headings or doc.headings[0].line != 1):
        return [Finding(doc.path, 1, 1, "REF001", "line 1 must be the title: '# Title'")]
    if len(lines) > 1 and lines[1].strip():
        return [Finding(doc.path, 2, 1, "REF001", "leave a blank line after the title")]
    if doc.second_block is None:
        return [Finding(doc.path, 1, 1, "REF001", "no summary paragraph after the title")]
    kind, line = doc.second_block
    if kind != "paragraph_open":
        return [Finding(doc.path, line, 1, "REF001", "the title must be followed by a one-paragraph summary in prose")]
    return []


def validate_pack(root: Path, external: bool = True) -> tuple[list[Finding], int]:
    """(findings, number of files checked)."""
    root = root.resolve()
    pack = Pack(root)
    out: list[Finding] = []
    files = pack_files(root)
    md_files = markdown_files(root)
    references = [rel for rel, role in files if role == "reference"]

    # SKILL.md: front matter and routing table.
    if not os.path.lexists(root / "SKILL.md"):
        out.append(Finding("SKILL.md", 1, 1, "PACK001", "SKILL.md not found at the pack root"))
    else:
        skill = pack.doc("SKILL.md")
        if skill is not None:
            fm, fm_findings = parse_front_matter(skill)
            out += fm_findings
            name, problem = read_install_name(root)
            out += check_front_matter(skill, fm, name, problem)
            out += check_routing(skill, references)

    # Every Markdown file: links, code blocks, excerpts, generated blocks, prose; references: title + summary.
    renderer = Renderer(root)
    sources = Sources(root)
    for rel in md_files:
        doc = pack.doc(rel)
        if doc is None:
            continue
        out += check_links(doc, root, pack.doc)
        out += check_document(doc, pack.module_text)
        out += check_blocks(rel, doc.lines, renderer, doc.in_code)
        out += check_figures(rel, doc.lines, sources, doc.in_code)
        if doc.degraded:
            out.append(Finding(rel, 1, 1, "PACK004", doc.degraded))
        if len(doc.headings) > MAX_HEADINGS:
            out.append(Finding(rel, 1, 1, "PACK004", f"{len(doc.headings):,} headings: anchors are computed for the "
                                                     f"first {MAX_HEADINGS:,} only"))
        if rel in references:
            out += check_reference_shape(doc)

    # Example modules (and the pack's own tool code): rules, docstrings.
    for rel, role in files:
        if role != "example":
            continue
        text = pack.text(rel)
        if text is not None:
            found, _ = check_module(rel, text)
            out += [f for f in found if not (f.code == "EX001" and rel.endswith("__init__.py"))]

    out += check_manifest(root)

    from .examples_import import check_imports

    out += check_imports(root)
    from .package import check_pack_package, check_plugin_drift
    from .plugin_manifests import check_plugin_manifests

    out += check_plugin_manifests(root) + check_pack_package(root) + check_plugin_drift(root)
    if external:
        from .external import run_markdownlint, run_mkdocs

        readable_md = [rel for rel in md_files if pack.doc(rel) is not None]
        out += run_markdownlint(root, readable_md)
        if any(f.code == "PACK003" for f in pack.findings):
            out.append(Finding("mkdocs.yml", 1, 1, "EXT002",
                               "mkdocs build skipped: the pack holds files that are not regular files (PACK003)"))
        else:
            out += run_mkdocs(root)

    out += pack.findings
    checked = len(set(md_files) | {rel for rel, _ in files})
    return capped(unique_sorted(out), MAX_FINDINGS_PER_FILE), checked
