"""Run an answer's code as untrusted code: bubblewrap, an unprivileged user, rlimits, a time limit.

Every grader that executes what an assistant wrote goes through :func:`run_isolated`:

- ``bwrap`` (Debian package ``bubblewrap``) gives new user, PID, network, IPC and UTS namespaces: the network
  namespace has only loopback, so the answer reaches nothing but servers started inside the sandbox (the
  throwaway Postgres of the Postgres checks);
- the whole file system is mounted read-only (the pack, the venv, the answer folder); the only writable place is
  a size-limited tmpfs at ``/tmp`` that holds the throwaway ``HOME`` and working folder and vanishes afterwards;
- the process runs as ``nobody`` with limits on processes (``RLIMIT_NPROC``), file size, open files, CPU time
  and, for Python-only checks, address space; the wall-clock limit kills the whole PID namespace.

A failure the sandbox caused is reported with a named reason (:func:`named_reason`), so a hostile answer fails
its task as "tried to write outside its folder", "process limit", "disk limit", "network blocked" or "time limit".
"""

from __future__ import annotations

import os
import pwd
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = ("graded answers run in a bubblewrap sandbox: install it (Debian/Ubuntu: apt-get install bubblewrap; "
                "set-up does this under CI as root)")


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces here: nothing is graded (never run answers unconfined)."""


@dataclass(frozen=True)
class Limits:
    seconds: float = 240.0
    processes: int = 512  # threads count too: a JVM and a Postgres need a few hundred
    tmp_bytes: int = 512 * 1024 * 1024  # the writable tmpfs: HOME, working folder, Postgres data, Spark temp
    file_bytes: int = 256 * 1024 * 1024
    open_files: int = 4096
    address_bytes: int | None = 6 * 1024 * 1024 * 1024  # None for a JVM (it reserves far more than it uses)


def _nobody() -> tuple[int, int]:
    try:
        e = pwd.getpwnam("nobody")
        return e.pw_uid, e.pw_gid
    except KeyError:
        return 65534, 65534


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(f"bwrap not found: {INSTALL_HINT}")
    return path


_CHECKED: dict[str, str] = {}


def check_sandbox() -> None:
    """One cheap probe per process: bwrap exists and can build the namespaces (some containers forbid them)."""
    if "ok" in _CHECKED:
        return
    if "error" in _CHECKED:
        raise SandboxUnavailable(_CHECKED["error"])
    try:
        proc = run_isolated(["/bin/true"], Path("/"), Limits(seconds=30), probe=True)
    except SandboxUnavailable as exc:
        _CHECKED["error"] = str(exc)
        raise
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        _CHECKED["error"] = f"bwrap cannot create its namespaces here ({tail[:200]}): {INSTALL_HINT}"
        raise SandboxUnavailable(_CHECKED["error"])
    _CHECKED["ok"] = "yes"


def _preexec(limits: Limits):
    def apply() -> None:
        os.setsid()
        for res, value in ((resource.RLIMIT_NPROC, limits.processes), (resource.RLIMIT_FSIZE, limits.file_bytes),
                           (resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_CORE, 0),
                           (resource.RLIMIT_CPU, int(limits.seconds) + 5)):
            resource.setrlimit(res, (value, value))
        if limits.address_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limits.address_bytes, limits.address_bytes))
    return apply


#: Folders the sandbox replaces with a tmpfs (``/root`` only as root): whatever of the grader's own installation
#: lives under one of them is bound back read-only (:func:`_bind_back`).
MASKED = ("/tmp", "/dev/shm", "/root")


def _own_paths() -> list[str]:
    """What a graded answer's driver needs to see: the pack's checkout, the interpreter (the venv and the base
    Python it links to, as named and resolved), its import path, and the tools named by environment variables."""
    root = Path(__file__).resolve().parents[3]
    candidates = [str(root), sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable),
                  *(p for p in sys.path if p),
                  *(os.environ[k] for k in ("JAVA_HOME", "SPARK_HOME", "PG_BIN") if os.environ.get(k))]
    out: set[str] = set()
    for c in candidates:
        for path in (os.path.abspath(c), os.path.realpath(c)):
            if os.path.isdir(path):
                out.add(path)
    return sorted(out)


def _bind_back(paths: list[str], masked: tuple[str, ...]) -> list[str]:
    """bwrap arguments binding back, read-only and at the same path, each of ``paths`` that lies under one of the
    ``masked`` folders (a checkout under /tmp, a pyenv under /root): outermost paths only, parents created 0755
    (bwrap would create them 0700, unreadable to the sandbox user)."""
    under = sorted({p for p in paths if any(p == m or p.startswith(m + "/") for m in masked)}, key=len)
    chosen: list[str] = []
    for p in under:
        if p in masked or any(p.startswith(c.rstrip("/") + "/") for c in chosen):
            continue
        chosen.append(p)
    cmd: list[str] = []
    made: set[str] = set()
    for path in chosen:
        parts = Path(path).parts
        for i in range(3, len(parts)):
            parent = str(Path(*parts[:i]))
            if parent not in made and parent not in (ANSWER_MOUNT, "/tmp/home", "/tmp/work"):
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", path, path]
    return cmd


def _root_masks() -> list[str]:
    """Run as root: hide /root (mode 700, unreadable to ``nobody``) behind an empty tmpfs; what the grader needs
    from there is bound back by :func:`_bind_back`."""
    return ["--perms", "0755", "--tmpfs", "/root"]


ANSWER_MOUNT = "/tmp/answer"
MAX_STAGED_BYTES = 20 * 1024 * 1024


def stage_answer(answer_dir: Path, into: Path) -> Path:
    """A readable copy of the answer folder (the sandbox user cannot read root's private folders); symbolic links
    are copied as links (inside the sandbox they resolve to the read-only file system), big files are left out."""
    target = into / "answer"
    target.mkdir(mode=0o755)
    total = 0
    for src in sorted(Path(answer_dir).rglob("*"))[:2000]:
        rel = src.relative_to(answer_dir)
        dst = target / rel
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_dir():
            dst.mkdir(mode=0o755, exist_ok=True)
        elif src.is_file():
            size = src.stat().st_size
            if total + size > MAX_STAGED_BYTES:
                continue
            total += size
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            dst.chmod(0o644)
    into.chmod(0o755)
    return target


def run_isolated(argv: list[str], answer_dir: Path, limits: Limits, env: dict[str, str] | None = None,
                 probe: bool = False, stdin_text: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` sandboxed with a copy of ``answer_dir`` read-only at :data:`ANSWER_MOUNT` (write that path
    into ``argv``) and the working folder in a throwaway tmpfs.

    Raises :class:`subprocess.TimeoutExpired` after ``limits.seconds`` (the namespace is killed first).
    """
    with tempfile.TemporaryDirectory(prefix="rtm-evals-stage-") as stage:
        staged = None if probe else stage_answer(Path(answer_dir), Path(stage))
        return _run(argv, staged, Path(stage), limits, env, stdin_text)


def _sandbox_user(stage: Path) -> tuple[int, int, Path]:
    """A user id of its own for each sandbox (RLIMIT_NPROC counts per user: one answer's fork bomb must not starve
    another's), with a passwd file naming it (Postgres' initdb looks its user up)."""
    uid = secrets.randbelow(60000) + 200000
    try:
        host = Path("/etc/passwd").read_text(encoding="utf-8")
    except OSError:
        host = ""
    passwd = stage / "passwd"
    passwd.write_text(host.rstrip("\n") + f"\nanswer:x:{uid}:{uid}:graded answer:/tmp/home:/bin/sh\n", encoding="utf-8")
    passwd.chmod(0o644)
    return uid, uid, passwd


def _run(argv: list[str], staged: Path | None, stage: Path, limits: Limits,
         env: dict[str, str] | None, stdin_text: str | None = None) -> subprocess.CompletedProcess:
    as_root = os.geteuid() == 0
    cmd = [bwrap_path(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
           "--perms", "1777", "--size", str(64 * 1024 * 1024), "--tmpfs", "/dev/shm",
           *(["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"] if as_root
             else ["--unshare-all"]), "--die-with-parent", "--new-session",
           "--perms", "0777", "--dir", "/tmp/home", "--perms", "0777", "--dir", "/tmp/work", "--chdir", "/tmp/work",
           "--clearenv"]
    if as_root:
        # Root's processes ignore RLIMIT_NPROC: bwrap keeps only the capabilities to drop to ``nobody``, and
        # setpriv does so inside before anything of the answer runs (no user namespace needed as root).
        cmd += [*_root_masks(), "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    # The checkout, its venv and the base Python stay visible wherever they live (under /tmp, /root, a path with
    # spaces): bound back read-only over the tmpfs that hides the rest of that folder.
    cmd += _bind_back(_own_paths(), MASKED if as_root else MASKED[:2])
    base_env = {"HOME": "/tmp/home", "TMPDIR": "/tmp", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
    for key in ("JAVA_HOME", "SPARK_HOME", "PG_BIN"):
        if os.environ.get(key):
            base_env[key] = os.environ[key]
    base_env.update(env or {})
    for key, value in base_env.items():
        cmd += ["--setenv", key, value]
    if staged is not None:
        cmd += ["--ro-bind", str(staged), ANSWER_MOUNT]
    if as_root:
        uid, gid, passwd = _sandbox_user(stage)
        cmd += ["--ro-bind", str(passwd), "/etc/passwd"]
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        cmd += ["--", setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all"]
        argv = list(argv)
    else:
        cmd += ["--"]
    cmd += argv
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_preexec(limits))
    try:
        out, err = proc.communicate(input=stdin_text, timeout=limits.seconds)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill(proc: subprocess.Popen) -> None:
    """Kill bwrap's session: --die-with-parent and the PID namespace take every process of the answer with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pass


_REASONS = [
    (re.compile(r"Read-only file system|EROFS", re.I), "tried to write outside its folder (read-only)"),
    (re.compile(r"Resource temporarily unavailable|BlockingIOError|can't start new thread|EAGAIN", re.I),
     "process limit"),
    (re.compile(r"No space left on device|File too large|ENOSPC|EFBIG", re.I), "disk limit"),
    (re.compile(r"Network is unreachable|ENETUNREACH|Temporary failure in name resolution|"
                r"Name or service not known|No address associated", re.I), "network blocked"),
    (re.compile(r"MemoryError|Cannot allocate memory|ENOMEM", re.I), "memory limit"),
]


def named_reason(text: str) -> str | None:
    """The sandbox limit an error text shows, if any."""
    for pattern, reason in _REASONS:
        if pattern.search(text or ""):
            return reason
    return None
