"""`skills.py check PATH...`: the pack's rules on realistic user files, the CLI contract, hostile input.

tests/check_files/bad/ holds user files with known-wrong patterns (each one
listed below with the exact codes it must raise); tests/check_files/good/ holds
the corrected versions, which must raise nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from rtm_lakebase.check.files import UsageProblem, check_paths
from rtm_lakebase.check.rules import python_rules

FILES = REPO / "tests" / "check_files"
SCRIPT = REPO / "scripts" / "skills.py"
LINE_RE = re.compile(r"^(?P<path>\S+):(?P<line>\d+):(?P<col>\d+) (?P<code>[A-Z]+\d{3}) .+$")

#: Every known-wrong pattern in the bad files: (path suffix, line, code).
EXPECTED_BAD = {
    ("payments_notebook.py", 4, "PROSE001"),   # "Enable Photon" in a # MAGIC %md cell
    ("payments_notebook.py", 4, "PROSE003"),   # "under 800 ms"
    ("payments_notebook.py", 21, "RTM009"),    # join without broadcast, found through variables across cells
    ("payments_notebook.py", 22, "RTM006"),    # Python UDF defined in another cell
    ("payments_notebook.py", 29, "RTM004"),    # outputMode("append")
    ("payments_notebook.py", 30, "RTM002"),    # realTime=interval, interval = "1 second"
    ("orders_job.py", 15, "SINK001"),          # open() returns False in except
    ("orders_job.py", 19, "SQL001"),           # f-string SQL
    ("orders_job.py", 33, "RTM005"),           # dropDuplicatesWithinWatermark
    ("orders_job.py", 35, "RTM003"),           # foreachBatch
    ("orders_job.py", 36, "RTM001"),           # realTime=True
    ("orders_job.py", 36, "RTM004"),           # no outputMode
    ("pipeline_split.py", 13, "RTM008"),       # session window built in build_writer(), trigger set in start()
    ("pipeline_split.py", 14, "RTM003"),       # foreachBatch in the helper, realTime in the caller
    ("pipeline_split.py", 14, "RTM004"),       # outputMode("complete") in the helper
    ("pipeline_split.py", 19, "RTM002"),       # TRIGGER = "500 milliseconds" (module constant)
    ("pipeline_split.py", 23, "RTM002"),       # realTime=micro_batch_interval() (a helper's return)
    ("pipeline_split.py", 29, "RTM007"),       # mapInPandas in the argument of the helper passed to start_with()
    ("sensor_alerts.ipynb#cell-1", 3, "PROSE002"),  # markdown cell: DBR 13.3
    ("sensor_alerts.ipynb#cell-1", 3, "PROSE004"),  # markdown cell: realTime=True
    ("sensor_alerts.ipynb#cell-5", 2, "RTM003"),    # foreachBatch; the trigger value comes from cell 4
    ("sensor_alerts.ipynb#cell-5", 4, "RTM002"),    # rt = "2 seconds" in cell 4
    ("lakebase_stream.py", 16, "RTM003"),      # foreachBatch in a builder function, writer reassigned
    ("lakebase_stream.py", 23, "RTM002"),      # .trigger(**RT), RT = {"realTime": "1 second"}
    ("lakebase_stream.py", 30, "LBS001"),      # .options(**opts), opts from a builder's dict(SINK, **extra): url
    ("lakebase_stream.py", 30, "LBS003"),      # batchinterval "100 ms" in the module-level dict
    ("lakebase_stream.py", 38, "LBS002"),      # format("postgresql") ... start() without dbtable
    ("settings_job.py", 27, "RTM002"),         # realTime=settings.interval, a dataclass field default "2 seconds"
    ("settings_job.py", 28, "RTM001"),         # **trigger_options(True): the helper's if-branch returns realTime=True
    ("settings_job.py", 29, "RTM002"),         # realTime=Limits().interval, a NamedTuple default "1 second"
    ("runbook.md", 3, "PROSE001"),
    ("runbook.md", 3, "PROSE002"),
    ("runbook.md", 9, "RTM002"),
    ("runbook.md", 9, "RTM004"),
}


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _key(f):
    return (f.path.split("/")[-1], f.line, f.code)


def test_every_known_wrong_pattern_is_caught_and_nothing_else():
    findings, checked = check_paths([str(FILES / "bad")])
    assert checked == 7
    assert {_key(f) for f in findings} == EXPECTED_BAD


def test_correct_user_files_have_no_finding():
    findings, checked = check_paths([str(FILES / "good")])
    assert checked == 7
    assert [f.text() for f in findings] == []


@pytest.mark.parametrize("name", ["payments_notebook.py", "orders_job.py", "pipeline_split.py",
                                  "sensor_alerts.ipynb", "runbook.md"])
def test_each_bad_file_has_a_good_twin(name):
    assert (FILES / "good" / name).is_file()
    bad, _ = check_paths([str(FILES / "bad" / name)])
    good, _ = check_paths([str(FILES / "good" / name)])
    assert bad and not good


def test_pack_only_checks_do_not_run(tmp_path):
    # An excerpt pointing nowhere, a fence without a language, a module without docstring: pack rules, not user rules.
    (tmp_path / "notes.md").write_text("# Notes\n\n<!-- excerpt: rtm_lakebase/none.py#x -->\n```\nplain\n```\n")
    (tmp_path / "job.py").write_text("x = 1\n")
    findings, checked = check_paths([str(tmp_path)])
    assert checked == 2 and findings == []


def test_helpers_followed_across_functions_and_call_order():
    """The trigger in one function, the query in another, defined in either order, called or not."""
    src = textwrap.dedent('''
        def main(spark):
            start(build(spark))

        def start(w):
            return w.trigger(realTime="5 seconds").start()

        def build(spark):
            return spark.readStream.format("rate").load().writeStream.foreachBatch(print).outputMode("update")
    ''')
    import ast
    assert {f.code for f in python_rules(ast.parse(src), "m.py")} == {"RTM003"}
    # The writer made elsewhere (a parameter nobody calls with): its output mode is not claimed missing.
    lib = 'def start(w):\n    return w.trigger(realTime="5 seconds").start()\n'
    assert python_rules(ast.parse(lib), "m.py") == []


def _ends_within(seconds: float, fn):
    """``fn()``'s result, or a failure if it has not returned after ``seconds`` (catches a hang only)."""
    import threading

    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    assert out, "raised (see the thread's exception above)"
    return out[0]


def test_recursive_and_fanning_helpers_end_quickly():
    import ast
    src = "def f(x):\n    return g(f(x))\n\ndef g(x):\n    return f(g(x))\n\nf(1)\n"
    fan = "\n".join(f"def h{i}(x):\n    return " + " + ".join(f"h{i + 1}(x)" for _ in range(8)) for i in range(30))
    fan += "\ndef h30(x):\n    return x.writeStream.outputMode('update').trigger(realTime='1 second').start()\nh0(1)\n"
    # Without memoising, the fan is 8**30 calls and the recursion never ends: a generous bound catches that.
    assert _ends_within(120, lambda: python_rules(ast.parse(src), "m.py")) == []
    assert {f.code for f in _ends_within(120, lambda: python_rules(ast.parse(fan), "m.py"))} == {"RTM002"}


# --- command line --------------------------------------------------------------------------------

def test_cli_text_lines_fix_and_exit_one():
    proc = run("check", "tests/check_files/bad/orders_job.py")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("FAILED: 6 findings in 1 file(s)")
    found = [l for l in lines if LINE_RE.match(l)]
    fixes = [l for l in lines if l.startswith("    fix: ")]
    assert len(found) == 6 and len(fixes) == 6
    assert found[0].startswith("tests/check_files/bad/orders_job.py:15:13 SINK001 ")


def test_cli_clean_exit_zero_and_json():
    proc = run("check", "tests/check_files/good")
    assert proc.returncode == 0 and proc.stdout.startswith("OK: no findings (7 files checked)")
    proc = run("check", "--format", "json", "tests/check_files/bad/sensor_alerts.ipynb")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["summary"]["ok"] is False and data["summary"]["findings"] == 4
    first = data["findings"][0]
    assert set(first) == {"path", "line", "col", "code", "message", "fix"}
    assert first["fix"] and first["path"] == "tests/check_files/bad/sensor_alerts.ipynb#cell-1"


@pytest.mark.parametrize("args, needle", [
    (["does/not/exist.py"], "no such file"),
    (["README.md", "nope"], "nope: no such file"),
    (["pyproject.toml"], "not a .py, .ipynb or .md file"),
    ([], "required"),
])
def test_cli_bad_usage_is_one_line_exit_two(args, needle):
    proc = run("check", *args)
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2  # argparse prints usage + one error line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_cli_unreadable_file_exit_two(tmp_path):
    f = tmp_path / "secret.py"
    f.write_text("x = 1\n")
    f.chmod(0)
    proc = run("check", str(f))
    assert proc.returncode == 2 and "permission denied" in proc.stderr and "Traceback" not in proc.stderr
    # Inside a folder it is a coded finding instead, and the other files are still checked.
    (tmp_path / "ok.py").write_text("x = 1\n")
    findings, checked = check_paths([str(tmp_path)])
    assert checked == 2 and [f.code for f in findings] == ["PACK002"]


# --- hostile input -------------------------------------------------------------------------------

def _codes(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data) if isinstance(data, bytes) else p.write_text(data)
    findings, _ = check_paths([str(p)])
    return {f.code for f in findings}


@pytest.mark.parametrize("name, data, code", [
    ("binary.py", b"\x00\x01\x02ELF\x00" * 100, "PY001"),
    ("latin1.py", "x = 'caf\xe9'\n".encode("latin-1"), "PACK002"),
    ("huge.py", "x = 1\n" * 60_000, "PACK004"),
    ("deep.py", "x = " + "(" * 5_000 + "1" + ")" * 5_000 + "\n", "PY001"),  # the parser's own nesting limit
    ("deep_unary.py", "x = " + "-" * 50_000 + "1\n", "PY002"),
    ("deep_attr.py", "x = a" + ".b" * 30_000 + "\n", "PY002"),
    ("bad.ipynb", "{\"cells\": [", "PACK002"),
    ("list.ipynb", "[1, 2, 3]", "PACK002"),
    ("deep.ipynb", "[" * 100_000 + "]" * 100_000, "PACK002"),
    ("huge.ipynb", "[" + "1," * 200_000 + "1]", "PACK004"),
    ("nested.ipynb", "{\"cells\": " + "[" * 500 + "]" * 500 + "}", "PACK002"),
    ("badcell.ipynb", json.dumps({"cells": [{"cell_type": "code", "source": 5}, 7]}), "PACK002"),
    ("binary.ipynb", b"\xff\xfe\x00\x00", "PACK002"),
    ("syntax.ipynb", json.dumps({"cells": [{"cell_type": "code", "source": ["def (:\n"]}]}), "PY001"),
    ("bad.md", b"# T\n\n\xff\xfe\n", "PACK002"),
])
def test_hostile_files_give_coded_findings(tmp_path, name, data, code):
    assert code in _codes(tmp_path, name, data)


def test_fifo_and_broken_symlink_in_folder_are_never_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "gone.md").symlink_to(tmp_path / "missing.md")
    # Opening the FIFO would block for ever: the bound only catches that hang.
    findings, checked = _ends_within(120, lambda: check_paths([str(tmp_path)]))
    assert {(f.path.split("/")[-1], f.code) for f in findings} == {("pipe.py", "PACK003"), ("gone.md", "PACK003")}


def test_hostile_cli_never_prints_a_traceback(tmp_path):
    (tmp_path / "deep.py").write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    (tmp_path / "bad.ipynb").write_text("not json")
    (tmp_path / "nul.md").write_bytes(b"# x\n\x00\x00\n```python\n\x00\n```\n")
    proc = run("check", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert all(LINE_RE.match(l) for l in proc.stdout.splitlines()[:-1] if not l.startswith("    fix: "))


def test_usage_problem_for_missing_path():
    with pytest.raises(UsageProblem):
        check_paths(["/nonexistent/path.py"])
