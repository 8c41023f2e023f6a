"""MkDocs hook: publish the pack's own files as the site, without copying them.

The skill's layout (``SKILL.md`` at the top, ``references/``, the code folders)
is what an assistant loads, so the site is built from those same files:
``SKILL.md`` becomes the home page and the references, benchmarks and data
they link to are added from the repository root. Relative links therefore
resolve the same way on disk, on GitHub and in the site, and
``mkdocs build --strict`` checks them.

Python modules are published as pages, not raw downloads: ``rtm_lakebase/sink/x.py``
becomes the page ``rtm_lakebase/sink/x.md`` (its docstring summary and the
highlighted source), and every Markdown link to a published ``.py`` file is
pointed at its page before MkDocs checks the links.
"""

from __future__ import annotations

import ast
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent

#: Globs relative to the repository root, published as-is (Python modules become pages).
_PUBLISHED = (
    "references/*.md",
    "rtm_lakebase/*.py",
    "rtm_lakebase/*/*.py",
    "rtm_lakebase/*/*/*.py",
    "rtm_lakebase/*/*.java",
    "rtm_lakebase/*/*.json",
    "upstream/*/*.md",
    "upstream/*/*.py",
    "upstream/*/*.patch",
    "pack_lab/*.py",
    "examples/*.py",
    "benchmarks/*.py",
    "benchmarks/*.md",
    "benchmarks/results/*.json",
    "benchmarks/results/*.png",
    "tests/*.py",
    "tests/*/*.py",
    "tests/data/*.json",
    "scripts/*.py",
    "scripts/*.sh",
    "manifest.json",
    "schemas/*.json",
    "pyproject.toml",
)

#: Module pages left out of the site search (tests and tools); the user's package and examples stay in.
_NOT_SEARCHED = ("tests/", "scripts/", "benchmarks/", "pack_lab/")
_LINK_RE = re.compile(r"(\]\()([^)\s#]+\.py)(#[^)\s]*)?(\))")
_REL_LINK_RE = re.compile(r"(\]\()(\.\./[^)\s#]*)(#[^)\s]*)?(\))")
_code_pages: set[str] = set()


def code_page(rel: str, source: str) -> str:
    """The Markdown page for one module: title, docstring summary, the highlighted source."""
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except (SyntaxError, ValueError):
        doc = ""
    summary = doc.strip().split("\n\n")[0].replace("\n", " ") if doc.strip() else ""
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", source)), default=0) + 1)
    parts = []
    if rel.startswith(_NOT_SEARCHED):  # the pack's own machinery: reachable by link, kept out of search
        parts += ["---", "search:", "  exclude: true", "---", ""]
    parts += [f"# `{rel}`", ""]
    if summary:
        parts += [summary, ""]
    parts += [f"{fence}python", source.rstrip("\n"), fence, ""]
    return "\n".join(parts)


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "index.md", abs_src_path=str(ROOT / "SKILL.md")))
    seen = {"index.md"}
    _code_pages.clear()
    for pattern in _PUBLISHED:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            if rel in seen or files.get_file_from_path(rel) is not None:
                continue
            seen.add(rel)
            if path.suffix == ".py" and path.name != "__init__.py":
                page = rel[:-3] + ".md"
                if files.get_file_from_path(page) is None and page not in seen:
                    seen.add(page)
                    _code_pages.add(rel)
                    files.append(File.generated(config, page, content=code_page(rel, path.read_text(encoding="utf-8"))))
                    continue
            files.append(File.generated(config, rel, abs_src_path=str(path)))
    return files


def _from_docs_dir(markdown: str, page, config) -> str:
    """A page written in ``docs/`` links repository files as they lie on disk (``../references/x.md``);
    in the site those files sit at the root, beside ``docs/``'s own pages: drop the ``docs/`` step."""
    if page.file.generated_by or not page.file.abs_src_path:
        return markdown
    docs = Path(config["docs_dir"]).resolve().relative_to(ROOT).as_posix()
    base = posixpath.dirname(page.file.src_uri)

    def repl(m: re.Match) -> str:
        on_disk = posixpath.normpath(posixpath.join(docs, base, m.group(2)))
        if on_disk == docs or on_disk.startswith(docs + "/") or on_disk.startswith(".."):
            return m.group(0)
        return f"{m.group(1)}{posixpath.relpath(on_disk, base or '.')}{m.group(3) or ''}{m.group(4)}"

    return _REL_LINK_RE.sub(repl, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Links as the site lays files out, and links to published modules pointed at their pages (``x.py`` → ``x.md``)."""
    markdown = _from_docs_dir(markdown, page, config)
    base = posixpath.dirname(page.file.src_uri)

    def repl(m: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(base, m.group(2)))
        if target in _code_pages:
            return f"{m.group(1)}{m.group(2)[:-3]}.md{m.group(3) or ''}{m.group(4)}"
        return m.group(0)

    return _LINK_RE.sub(repl, markdown)


_SPHINX_ROLE_RE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):(?=<code>)")


def on_page_content(html: str, page, config, files) -> str:
    """API pages: drop Sphinx cross-reference roles (``:class:`X```) that docstrings use; keep the name."""
    if page.file.src_uri.startswith("api/"):
        return _SPHINX_ROLE_RE.sub("", html)
    return html
