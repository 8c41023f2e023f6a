"""Hostile packs: whatever a pack holds, the validator ends in bounded time with coded findings, never a traceback.

Each class of hostile input (deep nesting in Python, YAML and JSON; FIFOs,
devices and symlinks named like pack files; huge files; pathological
Markdown; floods of findings) is generated at several sizes and placed in
several roles (reference, SKILL.md, example module, manifest, schema), and
the whole ``validate`` runs on it. These cases crashed or hung the validator
before the limits in ``skillcheck/limits.py`` existed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillcheck.limits import MAX_FILE_BYTES, MAX_FINDINGS_PER_FILE
from tests.validator.packbuilder import REPO, findings, write_manifest

SCRIPT = REPO / "scripts" / "skills.py"
#: Catches a hang, never a speed claim: one validate of a mini pack takes ~1 s on a quiet machine, and these
#: inputs hung the validator before its limits existed. Cost is bounded by the limits in skillcheck/limits.py
#: (counts of bytes, findings, nesting), which the tests below assert through the findings they produce.
HANG_SECONDS = 600


def _returns(fn, *args):
    """``fn(*args)``, failing the test if it has not returned within HANG_SECONDS (a hang, not slowness)."""
    import threading

    result: list = []
    errors: list = []

    def run():
        try:
            result.append(fn(*args))
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_SECONDS)
    assert not worker.is_alive(), f"{getattr(fn, '__name__', fn)} did not return within {HANG_SECONDS} s: a hang"
    if errors:
        raise errors[0]
    return result[0]


@pytest.fixture
def no_import_check(monkeypatch):
    """Skip the example-import subprocess where a test puts nothing importable in the pack (saves ~1 s each)."""
    import skillcheck.examples_import as examples_import

    monkeypatch.setattr(examples_import, "check_imports", lambda root, *a, **k: [])


def _validate(root: Path):
    found = _returns(findings, root)
    assert all(f.line >= 1 and f.col >= 1 for f in found)
    return found


def _codes_at(found, path: str) -> set[str]:
    return {f.code for f in found if f.path == path}


def _cli(root: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(SCRIPT), "validate", "--root", str(root), "--no-external"],
                          capture_output=True, text=True, timeout=HANG_SECONDS)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    return proc


def _regen(root: Path) -> None:
    try:
        write_manifest(root)
    except Exception:  # some hostile packs cannot be described; validate still must not crash
        pass


# --- deep nesting -----------------------------------------------------------------------------

NESTED_PYTHON = {
    "unary": lambda n: "x = " + "-" * n + "1\n",
    "binary": lambda n: "x = " + "+".join(["a"] * n) + "\n",
    "attribute": lambda n: "x = a" + ".b" * n + "\n",
    "lambda": lambda n: "x = " + "lambda: " * n + "1\n",
    "calls": lambda n: "x = " + "f(" * n + ")" * n + "\n",
    "lists": lambda n: "x = " + "[" * n + "]" * n + "\n",
    "chain": lambda n: "q = df" + ".writeStream" * n + ".start()\n",
}


@pytest.mark.parametrize("shape", sorted(NESTED_PYTHON))
@pytest.mark.parametrize("depth", [100, 5_000, 30_000])
def test_deep_python_in_a_block_and_a_module(pack, shape, depth):
    code = NESTED_PYTHON[shape](depth)
    guide = pack / "references" / "guide.md"
    guide.write_text(guide.read_text(encoding="utf-8") + f"\n```python\n{code}```\n", encoding="utf-8")
    (pack / "examples" / "deep.py").write_text('"""Deep."""\n' + code, encoding="utf-8")
    _regen(pack)
    found = _validate(pack)
    for path in ("references/guide.md", "examples/deep.py"):
        codes = _codes_at(found, path)
        if depth >= 5_000:
            assert codes & {"PY001", "PY002", "PACK004"}, (shape, path, codes)


@pytest.mark.parametrize("yaml_value", [
    "[" * 100 + "]" * 100,
    "[" * 50_000 + "]" * 50_000,
    "{a: " * 5_000 + "1" + "}" * 5_000,
    "\n".join("  " * i + f"k{i}:" for i in range(100)) + " 1",
    "\n".join("  " * i + f"k{i}:" for i in range(300)) + " 1",
    "&a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b]",
    "x" * (70 * 1024),
])
def test_hostile_front_matter(pack, yaml_value, no_import_check):
    skill = pack / "SKILL.md"
    text = skill.read_text(encoding="utf-8")
    skill.write_text(text.replace("license: Apache-2.0", "license: Apache-2.0\nextra: " + yaml_value, 1),
                     encoding="utf-8")
    _regen(pack)
    found = _validate(pack)
    assert _codes_at(found, "SKILL.md") & {"FM001", "FM002", "PACK004"}


@pytest.mark.parametrize("target", ["manifest.json", "schemas/manifest.schema.json"])
@pytest.mark.parametrize("depth", [70, 900, 100_000])
def test_deep_json(pack, target, depth, no_import_check):
    (pack / target).write_text("[" * depth + "]" * depth, encoding="utf-8")
    found = _validate(pack)
    assert _codes_at(found, target) & {"MAN002", "MAN003", "MAN005"}
    assert _cli(pack).returncode == 1


def test_deep_json_generator_source(pack, no_import_check):
    from tests.validator.cases import CASES

    CASES["GEN001"][1](pack)  # a current foreach-latency block and its JSON source
    (pack / "benchmarks" / "results" / "foreach_latency.json").write_text("[" * 100_000 + "]" * 100_000)
    found = _validate(pack)
    assert "GEN003" in _codes_at(found, "references/guide.md")


# --- files that are not regular files ---------------------------------------------------------

def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink_to(target: str):
    return lambda path: path.symlink_to(target)


SPECIAL = {
    "fifo": _fifo,
    "dev-zero": _symlink_to("/dev/zero"),
    "dev-urandom": _symlink_to("/dev/urandom"),
    "dev-null": _symlink_to("/dev/null"),
    "outside-file": _symlink_to("/etc/hostname"),
    "broken-link": _symlink_to("/no/such/file/here"),
    "self-loop": lambda path: path.symlink_to(path.name),
    "directory": lambda path: path.mkdir(),
}
PLACES = ["references/odd.md", "SKILL.md", "examples/odd.py", "manifest.json", "schemas/manifest.schema.json",
          "pyproject.toml", "docs/odd.md"]


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("place", PLACES)
def test_special_files_are_never_opened(pack, kind, place):
    path = pack / place
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    SPECIAL[kind](path)
    found = _validate(pack)
    if place.endswith(".md") or (place.endswith(".py") and kind != "directory"):  # a folder named x.py is a package
        assert _codes_at(found, place) & {"PACK002", "PACK003"}, [f.text() for f in found]
    proc = _cli(pack)
    assert proc.returncode == (1 if found else 0)


def test_generate_refuses_special_files_without_hanging(pack):
    os.mkfifo(pack / "references" / "pipe.md")
    proc = subprocess.run([sys.executable, str(SCRIPT), "generate", "--root", str(pack)],
                          capture_output=True, text=True, timeout=HANG_SECONDS)
    assert proc.returncode == 1 and "PACK003" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_generate_replaces_a_symlinked_manifest_instead_of_writing_through_it(pack, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("keep me", encoding="utf-8")
    (pack / "manifest.json").unlink()
    (pack / "manifest.json").symlink_to(outside)
    write_manifest(pack)
    assert outside.read_text(encoding="utf-8") == "keep me"
    assert not (pack / "manifest.json").is_symlink()


# --- huge files and floods ----------------------------------------------------------------------

HUGE = {
    "lines": lambda n: "# Guide\n\nSummary.\n\n" + "word " * (n // 5),
    "one-line": lambda n: "# Guide\n\nSummary.\n\n" + "x" * n + "\n",
    "brackets": lambda n: "# Guide\n\nSummary.\n\n" + "[" * n + "\n",
    "backticks": lambda n: "# Guide\n\nSummary.\n\n" + "`" * n + "\n",
    "quotes": lambda n: "# Guide\n\nSummary.\n\n" + ">" * n + " deep\n",
    "lists": lambda n: "# Guide\n\nSummary.\n\n" + "".join("  " * i + "- item\n" for i in range(min(n // 20, 2000))),
    "stars": lambda n: "# Guide\n\nSummary.\n\n" + "*a " * (n // 3) + "\n",
    "links": lambda n: "# Guide\n\nSummary.\n\n" + "[x](#nowhere) " * (n // 14) + "\n",
    "comments": lambda n: "# Guide\n\nSummary.\n\n" + "<!-- a " * (n // 7) + "\n",
    "headings": lambda n: "# Guide\n\nSummary.\n\n" + "## Same\n\n" * (n // 9),
    "prose-claims": lambda n: "# Guide\n\nSummary.\n\n" + "Set realTime=True now. " * (n // 23) + "\n",
}


@pytest.mark.parametrize("shape", sorted(HUGE))
@pytest.mark.parametrize("size", [MAX_FILE_BYTES // 4, MAX_FILE_BYTES - 1_000, MAX_FILE_BYTES * 3])
def test_huge_and_pathological_markdown(pack, shape, size, no_import_check):
    text = HUGE[shape](size)
    (pack / "references" / "guide.md").write_text(text, encoding="utf-8")
    _regen(pack)
    found = _validate(pack)
    at_guide = [f for f in found if f.path == "references/guide.md"]
    assert len(at_guide) <= MAX_FINDINGS_PER_FILE + 1
    if len(text.encode()) > MAX_FILE_BYTES:
        assert "PACK004" in {f.code for f in at_guide}


def test_huge_example_module(pack):
    (pack / "examples" / "big.py").write_text('"""Big."""\n' + "x = 1\n" * (MAX_FILE_BYTES // 5), encoding="utf-8")
    found = _validate(pack)
    assert "PACK004" in _codes_at(found, "examples/big.py")


def test_findings_are_capped_per_file_and_counted(pack, no_import_check):
    n = MAX_FINDINGS_PER_FILE * 5
    guide = pack / "references" / "guide.md"
    guide.write_text(guide.read_text(encoding="utf-8") + "".join(f"\nSee [p{i}](gone-{i}.md).\n" for i in range(n)),
                     encoding="utf-8")
    write_manifest(pack)
    at_guide = [f for f in _validate(pack) if f.path == "references/guide.md"]
    assert len(at_guide) == MAX_FINDINGS_PER_FILE + 1
    (extra,) = [f for f in at_guide if f.code == "PACK005"]
    assert f"{n - MAX_FINDINGS_PER_FILE} more findings" in extra.message


# --- targets no file system accepts ----------------------------------------------------------------

ODD_TARGETS = ["a%00b.md", "a" * 5_000 + ".md", "a/" * 3_000 + "b.md", "%ZZ", "x.md#" + "y" * 10_000,
               "/etc/passwd", "../../../etc/passwd", "\\\\server\\share.md", "~/x.md"]


@pytest.mark.parametrize("target", ODD_TARGETS, ids=range(len(ODD_TARGETS)))
def test_odd_link_and_excerpt_targets(pack, target, no_import_check):
    guide = pack / "references" / "guide.md"
    guide.write_text(guide.read_text(encoding="utf-8") + f"\nSee [odd]({target}).\n\n"
                     f"<!-- excerpt: {target.replace('%00', chr(0))}#r -->\n```python\nx = 1\n```\n", encoding="utf-8")
    write_manifest(pack)
    codes = _codes_at(_validate(pack), "references/guide.md")
    assert codes & {"LINK001", "LINK002"}, codes
    if target.count("#") == 0:  # 'PATH#NAME#r' is not an excerpt marker at all
        assert codes & {"EXC001", "EXC002"}, codes
    _cli(pack)


@pytest.mark.parametrize("name", ["mkdocs.yml", ".markdownlint.yaml"])
def test_external_tool_configs_that_are_fifos_are_not_handed_to_the_tools(pack, name):
    from skillcheck.external import run_markdownlint, run_mkdocs

    (pack / "node_modules").symlink_to(REPO / "node_modules")
    os.mkfifo(pack / name)
    found = (_returns(run_mkdocs, pack) if name == "mkdocs.yml"
             else _returns(run_markdownlint, pack, ["references/guide.md"]))
    assert [(f.path, f.code) for f in found] == [(name, "PACK003")]
