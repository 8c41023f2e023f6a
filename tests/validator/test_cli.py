"""The command line: output format, exit codes, --format json, generate, rules."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from skillcheck.codes import CODES
from tests.validator.packbuilder import REPO, add_block

SCRIPT = REPO / "scripts" / "skills.py"
LINE_RE = re.compile(r"^(?P<path>[^:\s]+):(?P<line>\d+):(?P<col>\d+) (?P<code>[A-Z]+\d{3}) .+$")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_clean_pack_exits_zero(pack):
    proc = run("validate", "--root", str(pack), "--no-external")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines() == [proc.stdout.strip()]
    assert proc.stdout.startswith("OK: no findings")


def test_findings_lines_and_exit_one(pack):
    add_block(pack, 'df.writeStream.foreach(w).outputMode("update").trigger(realTime=True).start()\n')
    (pack / "references" / "guide.md").write_text(
        (pack / "references" / "guide.md").read_text() + "\nSee [gone](gone.md).\n")
    proc = run("validate", "--root", str(pack), "--no-external")
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("FAILED: 3 findings in 2 file(s)")
    parsed = [LINE_RE.match(l) for l in lines[:-1]]
    assert all(parsed), lines
    got = sorted((m["path"], m["code"]) for m in parsed)
    assert got == [("manifest.json", "MAN004"), ("references/guide.md", "LINK001"), ("references/guide.md", "RTM001")]
    rtm = next(m for m in parsed if m["code"] == "RTM001")
    text = (pack / "references" / "guide.md").read_text().splitlines()
    assert "realTime=True" in text[int(rtm["line"]) - 1]
    assert text[int(rtm["line"]) - 1][int(rtm["col"]) - 1:].startswith("trigger")


def test_json_format(pack):
    add_block(pack, 'cur.execute(f"DELETE FROM {t}")\n')
    proc = run("validate", "--root", str(pack), "--no-external", "--format", "json")
    assert proc.returncode == 1
    payload = json.loads(proc.stdout)
    assert payload["summary"]["ok"] is False and payload["summary"]["findings"] == 1
    (finding,) = payload["findings"]
    assert finding["code"] == "SQL001" and finding["path"] == "references/guide.md"
    assert set(finding) == {"path", "line", "col", "code", "message"}


def test_json_format_clean(pack):
    proc = run("validate", "--root", str(pack), "--no-external", "--format", "json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"findings": [], "summary": json.loads(proc.stdout)["summary"]}
    assert json.loads(proc.stdout)["summary"]["ok"] is True


def test_usage_errors_exit_two(tmp_path):
    assert run().returncode == 2
    assert run("validate", "--format", "xml").returncode == 2
    assert run("frobnicate").returncode == 2
    proc = run("validate", "--root", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "not a directory" in proc.stderr


def test_generate_is_deterministic_and_fixes_drift(pack):
    manifest = pack / "manifest.json"
    first = manifest.read_bytes()
    assert run("generate", "--root", str(pack)).returncode == 0
    assert manifest.read_bytes() == first
    assert first.endswith(b"}\n")
    (pack / "references" / "guide.md").write_text((pack / "references" / "guide.md").read_text() + "\nMore.\n")
    assert run("validate", "--root", str(pack), "--no-external").returncode == 1
    assert run("generate", "--root", str(pack)).returncode == 0
    assert run("validate", "--root", str(pack), "--no-external").returncode == 0


def test_generate_refuses_broken_skill(pack):
    before = (pack / "manifest.json").read_bytes()
    (pack / "SKILL.md").write_text("---\nname: [broken\n---\n# X\n")
    proc = run("generate", "--root", str(pack))
    assert proc.returncode == 1
    assert "FM001" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert (pack / "manifest.json").read_bytes() == before


def test_rules_lists_every_code():
    proc = run("rules")
    assert proc.returncode == 0
    table, _, limits = proc.stdout.partition("\n\n")
    listed = {line.split()[0] for line in table.splitlines()[1:]}
    assert listed == set(CODES)
    for code in CODES.values():
        assert code.summary and code.fix


def test_rules_states_the_limits():
    from skillcheck.limits import MAX_FILE_BYTES, MAX_FINDINGS_PER_FILE

    limits = run("rules").stdout.partition("\n\n")[2]
    assert f"{MAX_FILE_BYTES:,} bytes" in limits
    assert f"at most {MAX_FINDINGS_PER_FILE} findings" in limits


def test_outside_the_pack_environment_a_missing_package_is_one_line_naming_it():
    """`python3 scripts/skills.py …` from a fresh clone (no .venv): the missing import, not a traceback."""
    code = ("import runpy, sys; sys.modules['markdown'] = None; sys.argv = ['skills.py', 'validate'];"
            "runpy.run_path('scripts/skills.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    # The facts, not the sentence: no traceback, the missing package named, and what to run.
    assert "Traceback" not in proc.stderr and "'markdown'" in proc.stderr, proc.stderr
    assert "scripts/setup.sh" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
