"""A throwaway local Postgres for the demo, the tests and the benchmarks.

``postgres_dsn()`` is the one entry point: when the ``PG_DSN`` environment
variable is set it yields that DSN untouched (a real Postgres or a Lakebase
endpoint); otherwise it starts a private server on a free loopback port, yields
its DSN, and removes it afterwards.

Server binaries are looked up in this order: ``PG_BIN`` (a folder holding
``initdb`` and ``pg_ctl``), ``pg_config --bindir``, the usual system folders,
then the binaries shipped by the ``pgserver`` package from PyPI, so a machine
without a system Postgres still works after ``pip install pgserver``.
Postgres refuses to run as root; when started by root the server runs as the
``postgres`` system user if there is one, otherwise ``nobody``.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

DSN_ENV = "PG_DSN"
BIN_ENV = "PG_BIN"
_SYSTEM_BIN_GLOBS = (
    "/usr/lib/postgresql/*/bin",
    "/usr/pgsql-*/bin",
    "/opt/homebrew/opt/postgresql*/bin",
    "/usr/local/opt/postgresql*/bin",
    "/usr/local/pgsql/bin",
)


class PostgresUnavailable(RuntimeError):
    """No Postgres could be reached or started; the message says how to get one."""


def _has_server(folder: Path) -> bool:
    return (folder / "initdb").is_file() and (folder / "pg_ctl").is_file()


def _version_key(folder: Path) -> tuple[int, ...]:
    digits = [int(part) for part in folder.parts if part.isdigit()]
    return tuple(digits) or (0,)


def candidate_bin_dirs() -> list[Path]:
    """Folders that may hold ``initdb``/``pg_ctl``, best first."""
    found: list[Path] = []
    if os.environ.get(BIN_ENV):
        found.append(Path(os.environ[BIN_ENV]))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                found.append(Path(out.stdout.strip()))
    system: list[Path] = []
    for pattern in _SYSTEM_BIN_GLOBS:
        system.extend(Path(p) for p in glob.glob(pattern))
    found.extend(sorted(system, key=_version_key, reverse=True))
    initdb = shutil.which("initdb")
    if initdb:
        found.append(Path(initdb).resolve().parent)
    # pgserver's binaries, located without importing it (its import has side effects).
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.origin:
        found.append(Path(spec.origin).parent / "pginstall" / "bin")
    return found


def find_bin_dir() -> Path:
    """The first folder with a usable Postgres server, or a clear error."""
    for folder in candidate_bin_dirs():
        if _has_server(folder):
            return folder
    raise PostgresUnavailable(
        "no Postgres server binaries found (initdb, pg_ctl). Either set PG_DSN to a running "
        "Postgres or Lakebase (e.g. PG_DSN='postgresql://user:pass@host:5432/db'), install "
        "Postgres (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql), "
        "set PG_BIN to its bin folder, or pip install pgserver (ships the binaries)."
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as_user() -> tuple[int, int] | None:
    """(uid, gid) to run the server as when we are root, else ``None``."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise PostgresUnavailable("running as root and neither a 'postgres' nor a 'nobody' user exists")


class EmbeddedPostgres:
    """A private Postgres cluster in a temporary folder, listening on 127.0.0.1.

    Use as a context manager. ``stop()``/``start()`` keep the data, so tests can
    restart the server under a running stream.
    """

    def __init__(self, bin_dir: Path | None = None, port: int | None = None,
                 settings: dict[str, str] | None = None, log=None):
        self.bin_dir = Path(bin_dir) if bin_dir else find_bin_dir()
        self.port = port or free_port()
        self.settings = dict(settings or {})
        self.user = "postgres"
        self.database = "postgres"
        self._log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._owner = _run_as_user()
        self.root = Path(tempfile.mkdtemp(prefix="rtm-pack-pg-"))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.logfile = self.root / "server.log"
        self._bin = self._usable_bin_dir()
        self.running = False

    # -- helpers -----------------------------------------------------------
    def _usable_bin_dir(self) -> Path:
        """Root runs the server as another user, who must be able to execute the binaries."""
        if self._owner is None:
            return self.bin_dir
        probe = subprocess.run([str(self.bin_dir / "pg_ctl"), "--version"], capture_output=True,
                               user=self._owner[0], group=self._owner[1])
        if probe.returncode == 0:
            return self.bin_dir
        # e.g. pgserver's binaries inside /root: copy the install where the user can read it.
        install = self.bin_dir.parent
        copy = self.root / "pginstall"
        shutil.copytree(install, copy, symlinks=True)
        self._chown_tree(copy)
        return copy / "bin"

    def _chown_tree(self, path: Path) -> None:
        if self._owner is None:
            return
        uid, gid = self._owner
        os.chown(path, uid, gid)
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        kwargs = {}
        if self._owner is not None:
            kwargs = {"user": self._owner[0], "group": self._owner[1], "extra_groups": []}
        env = dict(os.environ, LC_ALL="C", LANG="C")
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=self.root, **kwargs)

    def _check(self, result: subprocess.CompletedProcess, what: str) -> None:
        if result.returncode != 0:
            tail = ""
            if self.logfile.exists():
                tail = "\n".join(self.logfile.read_text(errors="replace").splitlines()[-15:])
            raise PostgresUnavailable(
                f"{what} failed (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
                + (f"\nserver log:\n{tail}" if tail else "")
            )

    # -- lifecycle ---------------------------------------------------------
    @property
    def dsn(self) -> str:
        return (f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.database} "
                "connect_timeout=10")

    def init(self) -> None:
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self._chown_tree(self.root)
        result = self._run(str(self._bin / "initdb"), "-D", str(self.data_dir), "-U", self.user,
                           "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync")
        self._check(result, "initdb")

    def start(self) -> str:
        if not self.data_dir.exists():
            self._log(f"[postgres] initialising a throwaway cluster with {self._bin}")
            self.init()
        options = {"listen_addresses": "127.0.0.1", "port": str(self.port),
                   "unix_socket_directories": str(self.socket_dir), "max_connections": "200"}
        options.update(self.settings)
        opts = " ".join(f"-c {k}={v}" for k, v in options.items())
        result = self._run(str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.logfile),
                           "-o", opts, "-w", "-t", "60", "start")
        self._check(result, "pg_ctl start")
        self.running = True
        self._log(f"[postgres] running on 127.0.0.1:{self.port}")
        return self.dsn

    def stop(self, mode: str = "fast") -> None:
        if not self.running:
            return
        result = self._run(str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop")
        self.running = False
        self._check(result, "pg_ctl stop")

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop (fast: connections are cut), stay down ``down_seconds``, start again on the same port."""
        self.stop()
        if down_seconds:
            time.sleep(down_seconds)
        self.start()

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()


@contextlib.contextmanager
def postgres_dsn(settings: dict[str, str] | None = None) -> Iterator[str]:
    """Yield ``$PG_DSN`` if set, else the DSN of a throwaway local server."""
    external = os.environ.get(DSN_ENV, "").strip()
    if external:
        yield external
        return
    with EmbeddedPostgres(settings=settings) as server:
        yield server.dsn


if __name__ == "__main__":  # pragma: no cover - manual check
    with postgres_dsn() as dsn:
        print(dsn)
