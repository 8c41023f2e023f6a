"""The lab's Kafka broker (pack_lab/kafka_broker.py) and its jars (pack_lab/maven_jars.py).

The lifecycle tests start brokers of their own in child processes and check
that no broker process and no data folder outlives the parent, on Ctrl-C and on
``kill -9`` alike.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pack_lab import kafka_broker, maven_jars

ROOT = Path(__file__).resolve().parent.parent


def test_every_jar_set_is_locked_with_a_sha256_per_jar():
    lock = json.loads(maven_jars.LOCK.read_text())
    assert set(lock) == set(maven_jars.SETS)
    for name, entry in lock.items():
        assert entry["artifacts"] == maven_jars.SETS[name]["artifacts"]
        assert entry["jars"] and all(len(sha) == 64 for sha in entry["jars"].values())
    assert "kafka_2.13-4.4.0.jar" in lock["kafka-broker"]["jars"]
    assert list(lock["pgjdbc"]["jars"]) == ["postgresql-42.7.14.jar"]


def test_a_jar_that_does_not_match_the_lock_is_refused(tmp_path):
    folder = tmp_path / "pgjdbc"
    folder.mkdir()
    (folder / "postgresql-42.7.14.jar").write_bytes(b"not the driver")
    (folder / ".verified").write_text("stale")
    with pytest.raises(maven_jars.JarsUnavailable, match="scripts/setup.sh"):
        maven_jars.jars("pgjdbc", cache=tmp_path)


def test_missing_java_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(kafka_broker.KafkaUnavailable, match="Java 17 or later.*KAFKA_BOOTSTRAP"):
        kafka_broker.KafkaBroker()


def test_missing_jars_is_one_clear_error(monkeypatch):
    def missing(name, *args, **kwargs):
        raise maven_jars.JarsUnavailable(f"{name} is not in .cache/jars/{name}; run `bash scripts/setup.sh`")

    monkeypatch.setattr(maven_jars, "jars", missing)
    with pytest.raises(kafka_broker.KafkaUnavailable, match="broker's jars are missing.*setup.sh"):
        kafka_broker.KafkaBroker()


def test_kafka_bootstrap_env_is_used_untouched(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "broker.example:9092")
    with kafka_broker.kafka_bootstrap() as bootstrap:
        assert bootstrap == "broker.example:9092"


def test_a_stale_folder_of_a_dead_owner_is_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / "rtm-pack-kafka-stale"
    stale.mkdir()
    (stale / "owner.pid").write_text(f"{dead.pid}\n")
    mine = tmp_path / "rtm-pack-kafka-mine"
    mine.mkdir()
    (mine / "owner.pid").write_text(f"{os.getpid()}\n")
    assert kafka_broker.sweep_stale_folders(str(tmp_path)) == [stale]
    assert mine.exists() and not stale.exists()


_CHILD = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a test run in the background
# (`cmd &` in a script) inherits SIGINT ignored, and Python then raises no KeyboardInterrupt on Ctrl-C
from pack_lab.kafka_broker import KafkaBroker
with KafkaBroker(log=None) as broker:
    print(broker.pid, broker.root, flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is not alive
        return stat.read().split(") ", 1)[1][0] != "Z"


def _start_child(tmp_path):
    if not maven_jars.is_ready("kafka-broker"):
        pytest.skip("the Kafka broker's jars are not fetched (scripts/install_jars.sh)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True, env=env,
                             cwd=tmp_path)
    line = child.stdout.readline()
    assert line, "the child did not start a broker"
    pid, root = line.split()
    assert _alive(int(pid))
    return child, int(pid), Path(root)


def _gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.kafka
@pytest.mark.slow
def test_ctrl_c_stops_the_broker_and_removes_its_folder(tmp_path):
    child, pid, root = _start_child(tmp_path)
    child.send_signal(signal.SIGINT)
    child.wait(timeout=120)
    assert _gone(pid), "the broker outlived Ctrl-C"
    assert not root.exists()


@pytest.mark.kafka
@pytest.mark.slow
def test_kill_9_of_the_parent_takes_the_broker_down(tmp_path):
    child, pid, root = _start_child(tmp_path)
    child.kill()
    child.wait(timeout=60)
    assert _gone(pid), "the broker outlived its parent killed with -9"
    # Its folder is left (nobody ran cleanup) and the next broker's start sweeps it.
    assert kafka_broker.sweep_stale_folders(str(root.parent)) and not root.exists()


def test_a_fetched_set_is_readable_by_other_users(tmp_path, monkeypatch):
    # The eval sandbox reads the cached pgjdbc as another user: a folder left 0700 by mkdtemp hid it there.
    entry = maven_jars._entry("pgjdbc")
    (jar_name, _sha), = entry["jars"].items()

    def fake_resolve(name, out):
        (out / jar_name).write_bytes(b"driver")

    monkeypatch.setattr(maven_jars, "_resolve", fake_resolve)
    monkeypatch.setattr(maven_jars, "_sha256", lambda path: entry["jars"].get(path.name, "x"))
    jars = maven_jars.fetch("pgjdbc", cache=tmp_path)
    assert [p.name for p in jars] == [jar_name]
    assert (maven_jars.set_dir("pgjdbc", tmp_path).stat().st_mode & 0o777) == 0o755
