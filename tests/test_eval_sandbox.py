"""Graded code is untrusted: hostile answers fail their check with a named reason and change nothing outside.

Each hostile answer (tests/eval_fixtures/hostile/<name>/solution.py) is graded through the same path as every
answer (drive.run_child -> sandbox.run_isolated). The test then checks the machine: the canary files outside
the answer folder, no process of the sandbox user left, the host listener never contacted.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from skillcheck.evals import sandbox
from skillcheck.evals.drive import run_child

HOSTILE = REPO / "tests" / "eval_fixtures" / "hostile"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (setup installs it)")


def _sandbox_processes() -> set[int]:
    """PIDs of answers graded by these tests (the driver's command line names slot_fix and the answer mount)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"slot_fix" in cmd and sandbox.ANSWER_MOUNT.encode() in cmd:
                out.add(int(d.name))
    return out


def _answer(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "hostile-answer"
    shutil.copytree(HOSTILE / name, folder)
    return folder


def _grade(folder: Path, timeout: float = 60) -> tuple[bool, str]:
    before = _sandbox_processes()
    ok, evidence = run_child("slot_fix", folder, timeout=timeout)
    deadline = time.monotonic() + 10
    while _sandbox_processes() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (_sandbox_processes() - before), "processes of the answer outlived its check"
    return ok, evidence


def test_an_answer_that_deletes_files_outside_its_folder_fails_and_deletes_nothing(tmp_path):
    import tempfile

    (REPO / ".cache").mkdir(exist_ok=True)
    canary = Path(tempfile.mkdtemp(prefix="sandbox-canary-", dir=REPO / ".cache"))  # outside /tmp: visible inside
    canary.chmod(0o755)
    (canary / "keep.txt").write_text("still here")
    try:
        _deletes_nothing(tmp_path, canary)
    finally:
        shutil.rmtree(canary)


def _deletes_nothing(tmp_path, canary):
    folder = _answer(tmp_path, "deletes-outside")
    (folder / "target.txt").write_text(str(canary))
    ok, evidence = _grade(folder)
    assert not ok and evidence.startswith("tried to write outside its folder (read-only)"), evidence
    assert (canary / "keep.txt").read_text() == "still here"
    assert sorted(p.name for p in folder.iterdir()) == ["solution.py", "target.txt"]


def test_a_fork_bomb_fails_with_the_process_limit_and_leaves_no_process(tmp_path):
    ok, evidence = _grade(_answer(tmp_path, "fork-bomb"))
    assert not ok and evidence.startswith("process limit"), evidence


def test_an_answer_that_fills_the_disk_fails_with_the_disk_limit_and_leaves_no_file(tmp_path):
    free_before = shutil.disk_usage(tmp_path).free
    folder = _answer(tmp_path, "fills-disk")
    ok, evidence = _grade(folder)
    assert not ok and evidence.startswith("disk limit"), evidence
    assert sorted(p.name for p in folder.iterdir()) == ["solution.py"]
    assert abs(shutil.disk_usage(tmp_path).free - free_before) < 64 * 1024 * 1024


def test_an_answer_that_opens_an_outside_connection_fails_and_reaches_nothing(tmp_path):
    ok, evidence = _grade(_answer(tmp_path, "outside-connection"))
    assert not ok and evidence.startswith("network blocked"), evidence


def test_the_host_loopback_is_not_the_sandbox_loopback(tmp_path):
    """A server the grader's machine runs on 127.0.0.1 (its Postgres, say) is out of the answer's reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    contacted = []

    def accept():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not contacted:
            try:
                conn, _ = server.accept()
                contacted.append(True)
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    folder = tmp_path / "hostile-answer"
    folder.mkdir()
    (folder / "solution.py").write_text(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\n")
    ok, evidence = _grade(folder)
    server.close()
    assert not ok and "ConnectionRefusedError" in evidence, evidence
    assert not contacted


def test_an_answer_that_never_exits_fails_with_the_time_limit_and_leaves_no_process(tmp_path):
    started = time.monotonic()
    ok, evidence = _grade(_answer(tmp_path, "never-exits"), timeout=5)
    assert not ok and evidence.startswith("time limit"), evidence
    # A grader that waited for the answer would hang for ever: 120 s is generous and only catches that.
    assert time.monotonic() - started < 120


def test_home_and_working_folder_are_throwaway_and_the_pack_is_read_only(tmp_path):
    folder = tmp_path / "hostile-answer"
    folder.mkdir()
    (folder / "solution.py").write_text(
        "import os, pathlib\n"
        "home = pathlib.Path.home(); assert str(home) == '/tmp/home', home\n"
        "(home / 'x').write_text('ok'); pathlib.Path('y').write_text('ok')\n"
        "assert os.getcwd() == '/tmp/work', os.getcwd()\n"
        f"pathlib.Path({str(REPO / 'SKILL.md')!r}).write_text('defaced')\n")
    skill_before = (REPO / "SKILL.md").read_bytes()
    ok, evidence = _grade(folder)
    assert not ok and evidence.startswith("tried to write outside its folder"), evidence
    assert (REPO / "SKILL.md").read_bytes() == skill_before


def test_an_answer_that_prints_a_verdict_of_its_own_fails(tmp_path):
    """The verdict lines carry a token the grader gives on stdin (closed before the answer is imported)."""
    folder = tmp_path / "hostile-answer"
    folder.mkdir()
    (folder / "solution.py").write_text(
        "import json, os, sys\n"
        "for token in ('', None):\n"
        "    print(json.dumps({'token': token, 'passed': True, 'evidence': ''}))\n"
        "print(json.dumps({'passed': True, 'evidence': ''}))\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n")
    ok, evidence = _grade(folder)
    assert not ok and "without a verdict" in evidence, evidence


def test_without_bwrap_grading_stops_instead_of_running_answers_unconfined(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "_CHECKED", {})
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "solution.py").write_text("raise SystemExit('ran')\n")
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        run_child("slot_fix", folder)


def test_mcnemar_exact_matches_the_binomial_tail():
    from skillcheck.evals.trials import mcnemar_exact

    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # 2 * (1/2)^5
    assert mcnemar_exact(2, 0) == pytest.approx(0.5)
    assert mcnemar_exact(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert mcnemar_exact(3, 3) == 1.0


@pytest.mark.spark
@pytest.mark.slow
def test_a_spark_batch_survives_an_answer_that_exits_or_hangs(tmp_path):
    """One answer ends the shared lab process, one never returns: each fails with its reason, the others are judged."""
    from skillcheck.evals.drive import run_spark_batch

    reference = REPO / "evals" / "answers" / "reference" / "fix-rtm-rules"
    exits = tmp_path / "exits"
    exits.mkdir()
    (exits / "solution.py").write_text("import os\n\ndef start(events, writer, checkpoint):\n    os._exit(3)\n")
    hangs = tmp_path / "hangs"
    hangs.mkdir()
    (hangs / "solution.py").write_text("import time\n\ndef start(events, writer, checkpoint):\n    time.sleep(3600)\n")
    verdicts = run_spark_batch([("start_foreach", reference), ("start_foreach", exits), ("start_foreach", hangs),
                                ("start_foreach", reference)], timeout=20)
    assert verdicts[0] == (True, "") and verdicts[3] == (True, ""), verdicts
    assert not verdicts[1][0] and verdicts[1][1].startswith("crash: start_foreach: the answer's process ended"), verdicts
    assert verdicts[2] == (False, "time limit: start_foreach: the answer did not finish within 20 s"), verdicts


def _clone_under(parent: Path) -> Path:
    """A copy of this checkout's tracked files (as they are in the work tree) at ``parent``, with a ``.venv``
    that is a symbolic link to this checkout's (no second download of pyspark)."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        src = REPO / rel
        if src.is_file():
            dst = parent / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    venv = REPO / ".venv"
    (parent / ".venv").symlink_to(venv.resolve() if venv.exists() else Path(sys.prefix), target_is_directory=True)
    return parent


@pytest.mark.postgres
def test_a_checkout_under_tmp_in_a_folder_with_a_space_grades_answers_in_the_sandbox():
    """The sandbox hides /tmp behind a tmpfs: a checkout there (and its .venv) must still be bound in, read-only."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rtm-clone-", dir="/tmp") as tmp:
        clone = _clone_under(Path(tmp) / "a clone")
        answers = Path(tmp) / "answers"
        for name in ("route-plain-postgres", "num-task-slots"):
            shutil.copytree(REPO / "evals" / "answers" / "reference" / name, answers / name)
        proc = subprocess.run([str(clone / ".venv" / "bin" / "python"), str(clone / "scripts" / "skills.py"), "eval",
                               "grade", str(answers), "--tasks", "route-plain-postgres,num-task-slots",
                               "--format", "json"], cwd=clone, capture_output=True, text=True, timeout=300,
                              env={k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"})
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        report = json.loads(proc.stdout)
        assert report["summary"] == {"tasks": 2, "passed": 2, "errors": 0, "pass_rate": 1.0}, report
        run = next(t for t in report["tasks"] if t["name"] == "route-plain-postgres")
        assert len(run["checks"]) == 4 and run["passed"]  # its last check ran the answer against Postgres


def test_bind_back_keeps_only_outermost_paths_under_the_masked_folders():
    cmd = sandbox._bind_back(["/tmp/a b/repo", "/tmp/a b/repo/.venv", "/usr/lib/python3", "/tmp", "/root/.pyenv/v"],
                             ("/tmp", "/root"))
    binds = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--ro-bind"]
    assert binds == ["/tmp/a b/repo", "/root/.pyenv/v"]
    assert ["--perms", "0755", "--dir", "/tmp/a b"] == cmd[:4]
