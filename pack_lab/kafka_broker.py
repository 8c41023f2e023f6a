"""A throwaway local Apache Kafka broker (KRaft, one node) for the demo, the tests and the benchmarks.

``kafka_bootstrap()`` is the one entry point, like ``postgres_dsn()`` for
Postgres: when ``KAFKA_BOOTSTRAP`` is set it yields that bootstrap address
untouched (a broker of your own); otherwise it starts a private broker on free
loopback ports, yields ``127.0.0.1:<port>``, and removes it afterwards::

    with kafka_bootstrap() as bootstrap:
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)...

The broker is Apache Kafka :data:`~pack_lab.maven_jars.KAFKA_VERSION` from the
pinned, checksummed jars the set-up fetched into ``.cache/jars/kafka-broker/``
(``scripts/install_jars.sh``), run as one combined broker+controller JVM with a
small heap, its own data folder under the system temp folder, and its log in
``server.log`` there. It never outlives the Python process that started it: it
runs in its own process group, is stopped by the context manager, by an
``atexit`` hook, and, when the parent dies without cleaning up (``kill -9``), by
the kernel (Linux ``PR_SET_PDEATHSIG``). A data folder left by a killed parent
is removed by the next broker that starts.

``KafkaBroker.stop()``/``start()`` keep the data and the ports, so a test can
restart the broker under a running stream.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path

from pack_lab import maven_jars
from pack_lab.local_postgres import free_port

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP"
#: Heap and GC of the broker JVM: the machines are small and shared.
JVM_OPTIONS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
_PREFIX = "rtm-pack-kafka-"
_STARTED_LINE = "Kafka Server started"


class KafkaUnavailable(RuntimeError):
    """No Kafka broker could be reached or started; the message says how to get one."""


def _say(message: str) -> None:
    print(f"[kafka] {message}", file=sys.stderr, flush=True)


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH, else a clear error."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise KafkaUnavailable("Java 17 or later is needed to run the Kafka broker and was not found; "
                               "install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set "
                               f"JAVA_HOME, or set {BOOTSTRAP_ENV} to a broker of your own")
    return found


def broker_classpath() -> str:
    try:
        jars = maven_jars.jars("kafka-broker")
    except maven_jars.JarsUnavailable as exc:
        raise KafkaUnavailable(f"the Kafka broker's jars are missing: {exc}; or set {BOOTSTRAP_ENV} "
                               "to a broker of your own") from None
    return os.pathsep.join(str(j) for j in jars)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: killed when the parent dies


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_folders(temp_dir: str | None = None) -> list[Path]:
    """Remove data folders of brokers whose owning process is gone (a parent killed with -9)."""
    removed = []
    base = Path(temp_dir or tempfile.gettempdir())
    for folder in base.glob(f"{_PREFIX}*"):
        owner = folder / "owner.pid"
        with contextlib.suppress(OSError, ValueError):
            if not _pid_alive(int(owner.read_text().split()[0])):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


_LIVE: weakref.WeakSet[KafkaBroker] = weakref.WeakSet()


@atexit.register
def _stop_live_brokers() -> None:
    for broker in list(_LIVE):
        broker.cleanup()


class KafkaBroker:
    """A private one-node KRaft broker listening on 127.0.0.1; use as a context manager."""

    def __init__(self, port: int | None = None, partitions: int = 1, log=_say,
                 start_timeout: float = 180.0):
        self.java = java_binary()
        self.classpath = broker_classpath()
        self.port = port or free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self.partitions = partitions
        self.start_timeout = start_timeout
        self._log = log or (lambda _msg: None)
        sweep_stale_folders()
        self.root = Path(tempfile.mkdtemp(prefix=_PREFIX))
        (self.root / "owner.pid").write_text(f"{os.getpid()}\n")
        self.data_dir = self.root / "data"
        self.logfile = self.root / "server.log"
        self.process: subprocess.Popen | None = None
        self._write_config()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.partitions),
            "num.network.threads": "2",
            "num.io.threads": "2",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        (self.root / "server.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
        (self.root / "log4j2.properties").write_text(
            "appender.file.type=File\nappender.file.name=FILE\n"
            f"appender.file.fileName={self.logfile}\n"
            "appender.file.layout.type=PatternLayout\n"
            "appender.file.layout.pattern=[%d] %p %m (%c)%n\n"
            "rootLogger.level=INFO\nrootLogger.appenderRef.file.ref=FILE\n"
            "logger.kafka.name=kafka\nlogger.kafka.level=INFO\n"
            "logger.org.name=org.apache.kafka\nlogger.org.level=WARN\n", encoding="utf-8")

    def _java(self, main: str, *args: str, **popen) -> list[str]:
        return [self.java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
                "-cp", self.classpath, main, *args]

    def _format(self) -> None:
        """Write the storage's ``meta.properties`` (what ``kafka-storage format`` writes for a
        static-quorum node; without a bootstrap checkpoint the broker starts at the newest
        production metadata version), which saves starting a second JVM."""
        def kafka_uuid() -> str:
            return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "meta.properties").write_text(
            f"node.id=1\ndirectory.id={kafka_uuid()}\nversion=1\ncluster.id={kafka_uuid()}\n",
            encoding="utf-8")

    def _tail(self, lines: int = 15) -> str:
        text = ""
        for path in (self.logfile, self.root / "stdout.log"):
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text.strip()

    def start(self) -> str:
        """Start (formatting the storage first if new) and wait until the broker says it started."""
        if self.process is not None and self.process.poll() is None:
            return self.bootstrap
        if not (self.data_dir / "meta.properties").exists():
            self._log(f"starting a throwaway KRaft broker in {self.root}")
            self._format()
        started_lines = self.logfile.read_text(errors="replace").count(_STARTED_LINE) \
            if self.logfile.exists() else 0
        stdout = open(self.root / "stdout.log", "ab")
        try:
            self.process = subprocess.Popen(
                self._java("kafka.Kafka", str(self.root / "server.properties")),
                stdout=stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root,
                preexec_fn=_die_with_parent)
        finally:
            stdout.close()
        _LIVE.add(self)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise KafkaUnavailable(f"the Kafka broker exited with code {self.process.returncode} while "
                                       f"starting; its log:\n{self._tail()}")
            if self.logfile.exists() and \
                    self.logfile.read_text(errors="replace").count(_STARTED_LINE) > started_lines:
                self._log(f"Kafka broker running on {self.bootstrap}")
                return self.bootstrap
            time.sleep(0.2)
        self.stop(kill=True)
        raise KafkaUnavailable(f"the Kafka broker did not start within {self.start_timeout:.0f} s; "
                               f"its log:\n{self._tail()}")

    def stop(self, kill: bool = False, timeout: float = 30.0) -> None:
        """Stop the broker (SIGTERM to its process group, SIGKILL after ``timeout`` or with ``kill``)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop, stay down ``down_seconds``, start again on the same ports with the same data."""
        self.stop()
        if down_seconds:
            time.sleep(down_seconds)
        self.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        _LIVE.discard(self)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()


@contextlib.contextmanager
def kafka_bootstrap(partitions: int = 1) -> Iterator[str]:
    """Yield ``$KAFKA_BOOTSTRAP`` if set, else the bootstrap address of a throwaway local broker."""
    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        yield external
        return
    with KafkaBroker(partitions=partitions) as broker:
        yield broker.bootstrap


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - manual use
    """``python -m pack_lab.kafka_broker``: run a broker until Ctrl-C, printing its address."""
    try:
        with KafkaBroker() as broker:
            print(broker.bootstrap, flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except KafkaUnavailable as exc:
        print(f"kafka_broker: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
