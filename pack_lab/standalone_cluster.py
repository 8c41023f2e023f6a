"""A Spark standalone cluster on loopback for the lab: one master and N workers, each its own JVM.

Started from the pinned PySpark's own classes (``pyspark/bin/spark-class``
``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), with its own
configuration, log and work folders under one temporary folder::

    with StandaloneCluster(workers=2, cores_per_worker=2) as cluster:
        spark = SparkSession.builder.master(cluster.master_url)...
        cluster.kill_worker(0)          # SIGKILL: the worker and its executor die, as a lost node
        cluster.start_worker(0)         # a fresh worker in the same slot

No process outlives its owner: every daemon runs in its own process group
(killed as a group, so a worker's executors and Python workers go with it),
``stop()`` runs from ``__exit__``, from ``atexit`` and from SIGTERM/SIGHUP
handlers, and on Linux each daemon also gets ``PR_SET_PDEATHSIG`` so a SIGKILLed
owner still takes its daemons down (the executors follow their worker).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pack_lab.local_postgres import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 90.0


class ClusterUnavailable(RuntimeError):
    """The standalone cluster could not start; the message says why."""


def spark_home() -> Path:
    """The installed pyspark package folder, which holds ``bin/spark-class`` and ``jars/``."""
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ClusterUnavailable("pyspark is not installed; the standalone cluster runs its classes") from exc
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise ClusterUnavailable(f"{home} has no bin/spark-class or jars/: is pyspark installed from its wheel?")
    return home


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGKILL when its parent dies (survives exec of java by spark-class)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None


_live: set[StandaloneCluster] = set()
_live_lock = threading.Lock()
_handlers_installed = False


def _stop_all() -> None:
    with _live_lock:
        clusters = list(_live)
    for cluster in clusters:
        cluster.stop()


def _on_signal(signum: int, _frame: object) -> None:
    _stop_all()
    # Then behave as the default action would: SIGINT → KeyboardInterrupt, others → exit 128+n.
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    """atexit always; SIGTERM/SIGHUP handlers only where nobody installed one (main thread)."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _on_signal)


class StandaloneCluster:
    """A master and ``workers`` workers on 127.0.0.1; a context manager."""

    def __init__(self, workers: int = 2, cores_per_worker: int = 2, memory_per_worker: str = "1g",
                 daemon_memory: str = "256m", log: Callable[[str], None] | None = None):
        if workers < 1 or cores_per_worker < 1:
            raise ValueError("a cluster needs at least one worker with at least one core")
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.daemon_memory = daemon_memory
        self._log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.home = spark_home()
        self.root: Path | None = None
        self.master: _Daemon | None = None
        self.worker_daemons: list[_Daemon | None] = [None] * workers
        self.master_port = 0
        self.master_ui_port = 0
        self._stopped = threading.Event()
        #: When set, ``stop()`` copies the daemons' and executors' logs here before removing the folder.
        self.keep_logs_in: Path | None = None

    # -- addresses ---------------------------------------------------------------
    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def total_cores(self) -> int:
        return self.workers * self.cores_per_worker

    def _env(self) -> dict[str, str]:
        assert self.root is not None
        env = dict(os.environ)
        for key in ("SPARK_CONF_DIR", "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
            env.pop(key, None)
        env.update({
            "SPARK_HOME": str(self.home),
            "SPARK_CONF_DIR": str(self.root / "conf"),  # empty: no user settings leak in
            "SPARK_LOG_DIR": str(self.root / "logs"),
            "SPARK_LOCAL_DIRS": str(self.root / "local"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON") or sys.executable,
        })
        return env

    def _spawn(self, name: str, cls: str, *args: str) -> _Daemon:
        assert self.root is not None
        log = self.root / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), cls, *args], stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env=self._env(), cwd=self.root,
                start_new_session=True,  # its own process group: killed as a group
                preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None)
        return _Daemon(name, proc, log)

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> StandaloneCluster:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise ClusterUnavailable("java was not found: the cluster's daemons need Java 17+ (set JAVA_HOME)")
        _install_handlers()
        self.root = Path(tempfile.mkdtemp(prefix="rtm-pack-cluster-"))
        for sub in ("conf", "logs", "local"):
            (self.root / sub).mkdir()
        with _live_lock:
            _live.add(self)
        try:
            self.master_port, self.master_ui_port = free_port(), free_port()
            self.master = self._spawn("master", MASTER_CLASS, "--host", "127.0.0.1", "--port",
                                      str(self.master_port), "--webui-port", str(self.master_ui_port))
            self._wait(lambda: self._state().get("status") == "ALIVE", "the master", self.master)
            for index in range(self.workers):
                self.start_worker(index)
        except BaseException:
            self.stop()
            raise
        self._log(f"[cluster] master {self.master_url}, {self.workers} workers × {self.cores_per_worker} cores "
                  f"(logs in {self.root / 'logs'})")
        return self

    def start_worker(self, index: int, wait: bool = True) -> None:
        """Start worker ``index`` (again, after :meth:`kill_worker`); wait until the master lists it."""
        assert self.root is not None
        current = self.worker_daemons[index]
        if current is not None and current.alive():
            raise RuntimeError(f"worker {index} is already running")
        before = self.alive_workers()
        work = self.root / f"work-{index}"
        work.mkdir(exist_ok=True)
        daemon = self._spawn(f"worker-{index}", WORKER_CLASS, "--host", "127.0.0.1", "--port", "0",
                             "--webui-port", str(free_port()), "--cores", str(self.cores_per_worker),
                             "--memory", self.memory_per_worker, "--work-dir", str(work), self.master_url)
        self.worker_daemons[index] = daemon
        if wait:
            self._wait(lambda: self.alive_workers() > before, f"worker {index}", daemon)

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to worker ``index``'s process group (the worker, its executors, their Python workers)."""
        daemon = self.worker_daemons[index]
        if daemon is None or not daemon.alive():
            raise RuntimeError(f"worker {index} is not running")
        pids = self._daemon_pids(daemon)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, sig)
        for pid in pids:  # descendants that left the group (PySpark's Python daemon)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.proc.wait(timeout=10)
        return len(pids)

    def stop(self) -> None:
        """Kill every daemon's process group and remove the folder; safe to call twice, from any path."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        daemons = [d for d in [*self.worker_daemons, self.master] if d is not None]
        trees = {d.pid: self._daemon_pids(d) for d in daemons}
        for daemon in daemons:  # workers first, politely, so executors are told to exit
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(daemon.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for daemon in daemons:
            while time.monotonic() < deadline and self.group_pids(daemon.pid):
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(daemon.pid, signal.SIGKILL)
            for pid in trees[daemon.pid]:  # descendants that left the group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                daemon.proc.wait(timeout=5)
        with _live_lock:
            _live.discard(self)
        if self.root is not None and self.keep_logs_in is not None:
            with contextlib.suppress(OSError):
                for log in [*self.root.glob("logs/*.log"), *self.root.glob("work-*/app-*/*/std*")]:
                    name = "_".join(log.relative_to(self.root).parts)
                    shutil.copyfile(log, Path(self.keep_logs_in) / name)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation -------------------------------------------------------------
    def _state(self) -> dict:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5) as r:
                return json.loads(r.read().decode())
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return sum(1 for w in self._state().get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, ready: Callable[[], bool], what: str, daemon: _Daemon) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            if not daemon.alive():
                tail = daemon.log.read_text(errors="replace").splitlines()[-10:] if daemon.log.exists() else []
                raise ClusterUnavailable(f"{what} exited with code {daemon.proc.returncode} while starting; "
                                         "last log lines:\n" + "\n".join(tail))
            time.sleep(0.3)
        raise ClusterUnavailable(f"{what} did not come up within {START_TIMEOUT_S:.0f} s (log: {daemon.log})")

    @staticmethod
    def group_pids(pgid: int) -> list[int]:
        """Live processes of process group ``pgid`` (Linux /proc)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                pids.append(int(entry.name))
        return pids

    @staticmethod
    def tree_pids(pid: int) -> list[int]:
        """``pid`` and every live descendant (PySpark's Python daemon leaves its parent's process group)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
        out, todo = [], [pid]
        while todo:
            current = todo.pop()
            out.append(current)
            todo.extend(children.get(current, []))
        return out if Path(f"/proc/{pid}").exists() else out[1:]

    def _daemon_pids(self, daemon: _Daemon) -> list[int]:
        return sorted(set(self.group_pids(daemon.pid)) | set(self.tree_pids(daemon.pid)))

    def all_pids(self) -> list[int]:
        """Every live process the cluster started (daemons, executors, Python workers)."""
        daemons = [d for d in [*self.worker_daemons, self.master] if d is not None]
        return sorted({pid for d in daemons for pid in self._daemon_pids(d)})

    def sockets_to(self, port: int) -> dict[int, int]:
        """Per worker index: open TCP connections its processes hold to 127.0.0.1:``port`` (Linux /proc)."""
        suffix = f":{port:04X}"
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # Java connects through IPv6 sockets
            with contextlib.suppress(OSError):
                for line in Path(table).read_text().splitlines()[1:]:
                    parts = line.split()
                    if parts[2].endswith(suffix) and parts[3] == "01":  # remote port, ESTABLISHED
                        inodes.add(parts[9])
        counts = {}
        for index in range(self.workers):
            n = 0
            for pid in self.worker_pids(index):
                with contextlib.suppress(OSError):
                    for fd in Path(f"/proc/{pid}/fd").iterdir():
                        with contextlib.suppress(OSError):
                            target = os.readlink(fd)
                            if target.startswith("socket:[") and target[8:-1] in inodes:
                                n += 1
            counts[index] = n
        return counts

    def busiest_worker(self, port: int) -> int:
        """The worker holding the most connections to ``port`` (where the sink tasks run); 0 on a tie."""
        counts = self.sockets_to(port)
        alive = [i for i in counts if self.worker_daemons[i] is not None and self.worker_daemons[i].alive()]
        return max(alive, key=lambda i: (counts[i], -i)) if alive else 0

    def worker_pids(self, index: int) -> list[int]:
        daemon = self.worker_daemons[index]
        return self._daemon_pids(daemon) if daemon is not None else []

    def retried_tasks(self) -> list[str]:
        """``Running task P.A in stage S`` lines with attempt A ≥ 1 from every executor's log (re-runs)."""
        import re

        pattern = re.compile(r"Running task (\d+)\.([1-9]\d*) in stage (\S+)")
        found = []
        if self.root is not None:
            for log in sorted(self.root.glob("work-*/app-*/*/stderr")):
                with contextlib.suppress(OSError):
                    found.extend(m.group(0) for m in pattern.finditer(log.read_text(errors="replace")))
        return found

    def session_conf(self, executor_memory: str = "512m", cores_per_executor: int | None = None) -> dict[str, str]:
        """Settings a driver adds to run on this cluster (one executor per worker, all cores)."""
        cores = cores_per_executor or self.cores_per_worker
        root = str(Path(__file__).resolve().parent.parent)
        pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        return {
            "spark.master": self.master_url,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": executor_memory,
            "spark.executor.cores": str(cores),
            "spark.cores.max": str(self.total_cores),
            "spark.executorEnv.PYTHONPATH": pythonpath,
            "spark.executorEnv.PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
        }


@contextlib.contextmanager
def standalone_cluster(**kwargs) -> Iterator[StandaloneCluster]:
    """``with standalone_cluster(workers=2) as cluster:`` — started, and stopped on every exit path."""
    cluster = StandaloneCluster(**kwargs)
    with cluster:
        yield cluster


if __name__ == "__main__":  # pragma: no cover - manual check: start, print, wait for Ctrl-C
    with standalone_cluster() as c:
        print(c.master_url, c.all_pids(), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
