"""The checker ships with the skill: ``python3 -m rtm_lakebase.check`` from the installed folder, standard library only.

- the packaged skill folder (``skills.py package``), copied alone to an empty directory, runs the checker with
  the system ``python3`` (no venv, no PYTHONPATH, ``-E -s``): every known-wrong user file gives exactly its
  expected findings, every corrected one none; ``--format json``, exit 1 on findings, 2 on bad usage, one line
  and no traceback on bad input;
- ``rtm_lakebase/check`` imports nothing outside the standard library: by a scan of its import statements, and
  by the modules a fresh isolated interpreter (``-I``) holds after a run;
- one source: ``skills.py check`` prints what the shipped checker prints, the validator's rule entry points and
  codes are the shipped ones, and the checker's Markdown reader finds what the validator's parser finds on
  every Markdown file of the repository.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from rtm_lakebase.check import codes as shipped_codes
from rtm_lakebase.check import markdown as shipped_markdown
from rtm_lakebase.check import python as shipped_python
from tests.test_check import EXPECTED_BAD, FILES, LINE_RE

CHECK = REPO / "rtm_lakebase" / "check"
SYSTEM_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
COMMAND = ["/usr/bin/env", "python3", "-E", "-s", "-m", "rtm_lakebase.check"]


def _system_python() -> None:
    proc = subprocess.run(["/usr/bin/env", "python3", "-c", "import sys; print(sys.prefix == sys.base_prefix)"],
                          env=SYSTEM_ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("no system python3 on /usr/bin:/bin")
    assert proc.stdout.strip() == "True", "the system python3 must not be a virtual environment"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The packaged skill folder, copied alone into an empty directory (as an assistant finds it installed)."""
    from skillcheck.package import build_package

    folder, _zip = build_package(REPO, tmp_path_factory.mktemp("dist"))
    assert (folder / "rtm_lakebase" / "check" / "__main__.py").is_file(), "the package lacks the checker"
    target = tmp_path_factory.mktemp("empty") / folder.name
    shutil.copytree(folder, target)
    for user_dir in ("bad", "good"):
        shutil.copytree(FILES / user_dir, target.parent / "user" / user_dir)
    return target


def run_installed(installed: Path, *args: str) -> subprocess.CompletedProcess:
    _system_python()
    return subprocess.run([*COMMAND, *args], cwd=installed, env=SYSTEM_ENV, capture_output=True, text=True,
                          timeout=120)


def test_the_installed_checker_finds_every_known_wrong_pattern(installed):
    proc = run_installed(installed, "../user/bad")
    assert proc.returncode == 1, proc.stderr
    found = set()
    lines = proc.stdout.splitlines()
    for k, line in enumerate(lines[:-1]):
        m = LINE_RE.match(line)
        if m:
            assert lines[k + 1].startswith("    fix: "), lines[k + 1]
            found.add((m["path"].split("/")[-1], int(m["line"]), m["code"]))
    assert found == EXPECTED_BAD
    assert lines[-1].startswith(f"FAILED: {len(EXPECTED_BAD)} findings")


def test_the_installed_checker_passes_every_corrected_file(installed):
    for path in sorted((installed.parent / "user" / "good").iterdir()):
        proc = run_installed(installed, f"../user/good/{path.name}")
        assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "OK: no findings (1 files checked)", "")


def test_the_installed_checker_speaks_json(installed):
    proc = run_installed(installed, "--format", "json", "../user/bad/orders_job.py")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert {(f["line"], f["code"]) for f in report["findings"]} == {
        (line, code) for path, line, code in EXPECTED_BAD if path == "orders_job.py"}
    assert all(f["fix"] for f in report["findings"]) and report["summary"]["ok"] is False


@pytest.mark.parametrize("args, cause", [
    (["no/such/file.py"], "no/such/file.py: no such file or directory"),
    (["--no-such-option", "x.py"], "unrecognized arguments: --no-such-option"),
    ([], "name at least one file or folder"),
    (["../user"], None),  # a folder: fine
])
def test_bad_usage_is_one_line_and_exit_2(installed, args, cause):
    proc = run_installed(installed, *args)
    if cause is None:
        assert proc.returncode == 1 and proc.stderr == ""
        return
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and cause in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_bad_input_is_a_finding_never_a_traceback(installed, tmp_path):
    user = installed.parent / "user" / "hostile"
    user.mkdir()
    (user / "binary.py").write_bytes(b"\xff\xfe\x00 not text")
    (user / "broken.ipynb").write_text("{ not json", encoding="utf-8")
    (user / "deep.py").write_text("x = " + "(" * 5000 + ")" * 5000 + "\n", encoding="utf-8")
    os.mkfifo(user / "pipe.md")
    proc = run_installed(installed, "../user/hostile")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    codes = {m["code"] for m in map(LINE_RE.match, proc.stdout.splitlines()) if m}
    assert {"PACK002", "PACK003"} <= codes and codes & {"PY001", "PY002"}, proc.stdout


# --- standard library only ----------------------------------------------------------------------------

def test_the_checker_imports_only_the_standard_library():
    for path in sorted(CHECK.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name.startswith("rtm_lakebase.check"), (
                    f"{path.relative_to(REPO)} imports {name}")
    top_init = ast.parse((REPO / "rtm_lakebase" / "__init__.py").read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(top_init) if isinstance(n, (ast.Import, ast.ImportFrom))], (
        "rtm_lakebase/__init__.py runs before the checker: it must import nothing")


_LOADED = r"""
import sys
before = set(sys.modules)  # what the interpreter itself loaded at start-up (site hooks)
sys.path.insert(0, sys.argv[1])
from rtm_lakebase.check.cli import main
status = main(sys.argv[2:])
mine = sorted(m for m in set(sys.modules) - before if m.split(".")[0] not in sys.stdlib_module_names)
print("LOADED", ",".join(mine), status, file=sys.stderr)
"""


def test_an_isolated_interpreter_loads_nothing_but_the_standard_library(installed):
    _system_python()
    proc = subprocess.run(["/usr/bin/env", "python3", "-I", "-c", _LOADED, str(installed), "../user"],
                          cwd=installed, env=SYSTEM_ENV, capture_output=True, text=True, timeout=120)
    loaded = re.search(r"^LOADED (\S*) (\d+)$", proc.stderr, re.M)
    assert loaded, proc.stderr[-2000:]
    assert loaded[2] == "1"
    assert all(m == "rtm_lakebase" or m.startswith("rtm_lakebase.check") for m in loaded[1].split(",")), loaded[1]


# --- one source ---------------------------------------------------------------------------------------

def test_skills_py_check_prints_what_the_shipped_checker_prints():
    args = [str(FILES / "bad"), str(FILES / "good" / "runbook.md")]
    via_skills = subprocess.run([sys.executable, str(REPO / "scripts" / "skills.py"), "check", *args],
                                capture_output=True, text=True, timeout=120)
    direct = subprocess.run([sys.executable, "-m", "rtm_lakebase.check", *args], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert via_skills.returncode == direct.returncode == 1
    assert via_skills.stdout == direct.stdout and via_skills.stdout.count(" fix: ") == len(EXPECTED_BAD)


def test_the_validator_runs_the_shipped_rules_and_codes():
    from skillcheck import codeblocks
    from skillcheck.codes import CODES

    assert not (REPO / "scripts" / "skillcheck" / "rules").exists()
    assert not (REPO / "scripts" / "skillcheck" / "usercheck.py").exists()
    assert codeblocks.check_python_source is shipped_python.check_python_source
    for code, entry in shipped_codes.CODES.items():
        assert CODES[code] is entry
    assert set(CODES) > set(shipped_codes.CODES)


def _validator_findings(rel: str, text: str) -> list:
    from skillcheck.codeblocks import check_document
    from skillcheck.markdown import parse

    pack_only = ("FENCE", "EXC", "HTML")
    return sorted(f for f in set(check_document(parse(rel, text), lambda _m: None))
                  if not f.code.startswith(pack_only))


def _markdown_files() -> list[str]:
    from skillcheck.packfiles import markdown_files

    found = markdown_files(REPO) + [p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("*.md")]
    return sorted(set(found))


@pytest.mark.parametrize("rel", _markdown_files())
def test_the_shipped_markdown_reader_finds_what_the_validator_finds(rel):
    text = (REPO / rel).read_text(encoding="utf-8")
    shipped = sorted(set(shipped_markdown.check_markdown_file(rel, text)))
    assert shipped == _validator_findings(rel, text)


def test_the_reader_sees_prose_blocks_and_opt_outs_where_commonmark_does():
    text = "\n".join([
        "# Enable Photon for real-time mode",          # 1: heading prose -> PROSE001
        "",
        "<!-- skills: allow RTM004 -- shows the error -->",
        "```python",
        "q.writeStream.trigger(realTime='5 seconds').start()",  # 5: RTM004 suppressed
        "```",
        "",
        "    indented code: realTime=True is not prose",  # 8: indented code block, not checked
        "",
        "- first item runs on DBR 13.3",                 # 10: list item -> PROSE002
        "- second item",
        "",
        "<!--",
        "realTime=True inside a comment",                # 14: not prose
        "-->",
        "~~~text",
        "realTime=True",                                  # 17: text block line -> PROSE004
        "~~~",
    ]) + "\n"
    got = sorted((f.line, f.code) for f in shipped_markdown.check_markdown_file("doc.md", text))
    assert got == [(1, "PROSE001"), (10, "PROSE002"), (17, "PROSE004")]
    assert got == sorted((f.line, f.code) for f in _validator_findings("doc.md", text))


def test_the_installed_checker_lists_every_code_with_its_fix(installed):
    proc = run_installed(installed, "--codes")
    assert proc.returncode == 0 and proc.stderr == ""
    listed = {line.split()[0] for line in proc.stdout.splitlines()}
    assert listed == set(shipped_codes.CODES)
    assert all(" -- " in line for line in proc.stdout.splitlines())


# Documents built from the constructs the reader must tell apart: prose (with and without a known-wrong claim),
# list items, quotes, headings, tables, rules, comments and opt-outs, HTML, indented code, and fences of every
# kind nested in lists and quotes.
_PY = ["q.writeStream.trigger(realTime=True).start()", "x = 1",
       "df.writeStream.foreachBatch(f).trigger(realTime='1 second').start()"]
_PROSE = ["Enable Photon for this.", "Runs on DBR 13.3 only.", "Use realTime=True here", "Nothing wrong here.",
          "Photon is not needed."]
_LINES = st.one_of(
    st.sampled_from(_PROSE),
    st.tuples(st.sampled_from(["- ", "1. ", "> ", "## ", "    ", "  ", "  - ", "* ", "+ ", "1) ", "10. ", "\t",
                               "   ", "-\t", ">", "> - "]), st.sampled_from(_PROSE)).map("".join),
    st.sampled_from(["", "---", "===", "***", "| a | b |", "| --- | --- |", "<div>", "<!--", "-->",
                     "<!-- skills: allow PROSE001 -- quoted -->", "<!-- skills: allow RTM001 -- shown -->"]),
)
_FENCES = st.tuples(st.sampled_from(["```", "~~~", "````"]), st.sampled_from(["python", "text", "", "py"]),
                    st.lists(st.sampled_from(_PY + _PROSE), max_size=3),
                    st.sampled_from(["", "  ", "> ", "   ", "    ", "- ", "1. ", "\t", "      "]))


def _fence(marker: str, lang: str, body: list[str], prefix: str) -> list[str]:
    return [prefix + marker + lang] + [prefix + b for b in body] + [prefix + marker]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(_LINES.map(lambda line: [line]), _FENCES.map(lambda f: _fence(*f))), max_size=12))
def test_the_shipped_markdown_reader_matches_the_validators_parser_on_generated_documents(pieces):
    text = "\n".join(line for piece in pieces for line in piece) + "\n"
    shipped = sorted(set(shipped_markdown.check_markdown_file("doc.md", text)))
    assert shipped == _validator_findings("doc.md", text), text
