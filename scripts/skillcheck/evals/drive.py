"""Run checks that execute an answer's code: Postgres ones in a child process, Spark ones on the lab session.

Child process (``python -m skillcheck.evals.drive NAME ANSWER_DIR [DSN]``):
the answer's module is imported there, so an answer that hangs, crashes or
calls ``sys.exit`` cannot take the grader with it; the child prints one JSON
line ``{"passed": bool, "evidence": str}`` and is killed after a timeout.

The sink driver plays Spark's part of the ``foreach`` contract (the writer
is pickled, a fresh copy per task and epoch, ``open`` / ``process`` /
``close(error)``) against a private embedded Postgres it can restart, and
judges only behaviour: the table's exact content and whether every error
reached the caller. It never looks at how the writer is built.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[3]
CHILD_TIMEOUT = 240


class CheckFailed(Exception):
    pass


class GraderUnavailable(Exception):
    """The grader's own machinery (Postgres, Spark) failed: the answer is not judged."""


def load_module(path: Path, name: str | None = None):
    mod_name = name or f"eval_answer_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # pickling classes defined in the answer needs the module importable
    spec.loader.exec_module(module)
    return module


# --- child-process drivers ------------------------------------------------------------------------

def _connect(dsn: str):
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def pg_upsert(answer_dir: Path, dsn: str) -> None:
    """``upsert(conn, account_id, balance)``: twice on one key, once on another; table exact; SQL injection inert."""
    mod = load_module(answer_dir / "solution.py")
    table = "accounts"
    with _connect(dsn) as admin:
        admin.execute(f"DROP TABLE IF EXISTS {table}")
        admin.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, balance numeric NOT NULL)")
        try:
            with _connect(dsn) as conn:
                mod.upsert(conn, "a-1", 10)
                mod.upsert(conn, "a-1", 25)
                mod.upsert(conn, "o'brien'); DROP TABLE accounts; --", 7)
                conn.commit() if not conn.autocommit else None
            rows = sorted((r[0], float(r[1])) for r in admin.execute(f"SELECT id, balance FROM {table}").fetchall())
        finally:
            admin.execute(f"DROP TABLE IF EXISTS {table}")
    want = [("a-1", 25.0), ("o'brien'); DROP TABLE accounts; --", 7.0)]
    if rows != want:
        raise CheckFailed(f"table after upserts is {rows}, expected {want}")


def _row(**kw):
    from pyspark.sql import Row

    return Row(**kw)


def _epoch(make_writer: Callable[[], Any], partition: int, epoch: int, rows: list) -> None:
    """One task of one epoch, as Spark runs it: a fresh unpickled copy; close(error) then re-raise."""
    writer = pickle.loads(pickle.dumps(make_writer()))
    if not writer.open(partition, epoch):
        raise CheckFailed(f"open({partition}, {epoch}) returned a falsy value: Spark would skip these rows silently")
    try:
        for r in rows:
            writer.process(r)
    except BaseException as exc:
        writer.close(exc)
        raise
    writer.close(None)


def sink(answer_dir: Path, _dsn: str = "") -> None:
    """``EventsWriter(dsn, table)``: replays, older versions, reordering, hostile values, a restart, a closed port."""
    sys.path.insert(0, str(_ROOT))
    from pack_lab.local_postgres import EmbeddedPostgres, free_port

    mod = load_module(answer_dir / "solution.py", "eval_sink_answer")
    table = "events_sink"
    try:
        server_cm = EmbeddedPostgres(log=lambda _m: None)
        server = server_cm.__enter__()
    except Exception as exc:
        raise GraderUnavailable(f"embedded Postgres did not start: {str(exc)[:200]}") from None
    with contextlib.ExitStack() as stack:
        stack.push(server_cm.__exit__)
        dsn = server.dsn
        with _connect(dsn) as admin:
            admin.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, version bigint NOT NULL, payload text)")

        def make():
            return mod.EventsWriter(dsn, table)

        def table_state() -> dict:
            with _connect(dsn) as c:
                return {r[0]: (r[1], r[2]) for r in c.execute(f"SELECT id, version, payload FROM {table}")}

        expected: dict[str, tuple] = {}

        def expect(state_name: str) -> None:
            got = table_state()
            if got != expected:
                diff = {k: (got.get(k), expected.get(k)) for k in set(got) | set(expected) if got.get(k) != expected.get(k)}
                shown = {k: v for k, v in list(diff.items())[:3]}
                raise CheckFailed(f"after {state_name}: table differs (got, expected) for {len(diff)} key(s): "
                                  f"{ {k: (str(a)[:60], str(b)[:60]) for k, (a, b) in shown.items()} }")

        first = [_row(id=k, version=1, payload=f"p-{k}") for k in ("a", "b", "c")]
        _epoch(make, 0, 0, first)
        _epoch(make, 0, 0, first)  # the same epoch replayed after a failure
        expected.update({k: (1, f"p-{k}") for k in ("a", "b", "c")})
        expect("an epoch and its replay")

        _epoch(make, 0, 1, [_row(id="a", version=3, payload="a3"), _row(id="b", version=2, payload="b2")])
        expected.update({"a": (3, "a3"), "b": (2, "b2")})
        expect("newer versions")

        _epoch(make, 0, 0, first)  # an older epoch replayed late: older versions must not win
        expect("an older-version replay")

        _epoch(make, 0, 2, [_row(id="d", version=5, payload="d5"), _row(id="d", version=4, payload="d4"),
                            _row(id="e", version=2, payload="e2"), _row(id="e", version=7, payload="e7")])
        _epoch(make, 1, 2, [_row(id="d", version=1, payload="d1"), _row(id="a", version=2, payload="a2")])
        expected.update({"d": (5, "d5"), "e": (7, "e7")})
        expect("reordered rows (same key twice in one epoch, across partitions)")

        hostile = {"h1": "'; DROP TABLE events_sink; --", "h2": "ü✓😀 \u202e", "h3": "back\\slash \"quoted\" $1 %s {}",
                   "h4": "x" * 100_000, "h5": "", "o'brien": "id with a quote", "h7": None}
        _epoch(make, 0, 3, [_row(id=k, version=1, payload=v) for k, v in hostile.items()])
        expected.update({k: (1, v) for k, v in hostile.items()})
        expect("hostile values")

        raised = None
        try:
            _epoch(make, 0, 4, [_row(id="nul", version=1, payload="bad\x00byte")])
        except CheckFailed:
            raise
        except Exception as exc:  # the value Postgres cannot store must fail the task
            raised = exc
        if raised is None:
            got = table_state().get("nul")
            raise CheckFailed(f"a row Postgres cannot store (NUL byte) did not fail the task; table holds {got!r}: "
                              "an error was swallowed or the value silently altered")
        expect("a rejected row")

        # A restart of Postgres in the middle of an epoch: the task fails (or the rows still land), and the
        # retried task writes everything.
        batch = [_row(id=f"r{i}", version=1, payload=f"r{i}") for i in range(20)]
        writer = pickle.loads(pickle.dumps(make()))
        if not writer.open(0, 5):
            raise CheckFailed("open() returned a falsy value")
        failed = None
        try:
            for r in batch[:10]:
                writer.process(r)
            server.restart()
            for r in batch[10:]:
                writer.process(r)
        except Exception as exc:
            failed = exc
        try:
            writer.close(failed)
        except Exception as exc:
            failed = failed or exc
        if failed is None:
            expected.update({r["id"]: (1, r["payload"]) for r in batch})
            expect("a Postgres restart inside an epoch (the writer reported success, so every row must be there)")
        else:
            _epoch(make, 0, 5, batch)  # Spark retries the task
            expected.update({r["id"]: (1, r["payload"]) for r in batch})
            expect("a Postgres restart and the retried task")

    # A closed port: the task must fail, quickly, not report success.
    port = free_port()
    closed = f"host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=3"
    start = time.monotonic()
    try:
        _epoch(lambda: mod.EventsWriter(closed, table), 0, 0, [_row(id="z", version=1, payload="z")])
    except CheckFailed:
        raise
    except Exception:
        pass
    else:
        raise CheckFailed("writing to a closed port reported success: an error was swallowed")
    if time.monotonic() - start > 60:
        raise CheckFailed(f"a closed port took {time.monotonic() - start:.0f} s to fail")


class _FakeConf:
    def __init__(self):
        self.values: dict[str, str] = {}

    def set(self, key, value):
        self.values[str(key)] = str(value)

    def get(self, key, default=None):
        return self.values.get(key, default)


class _FakeSpark:
    def __init__(self):
        self.conf = _FakeConf()


def slot_fix(answer_dir: Path, _dsn: str = "") -> None:
    """The fixed query fits 4 task slots: Kafka source tasks (maxPartitions) + shuffle partitions <= 4."""
    sys.path.insert(0, str(_ROOT))
    from rtm_lakebase.calc.sizing import QueryShape, kafka_source_tasks

    from .expected import slot_fix as scenario

    mod = load_module(answer_dir / "solution.py")
    s = scenario()
    fake = _FakeSpark()
    mod.configure(fake)
    shuffle = fake.conf.get("spark.sql.shuffle.partitions")
    if shuffle is None or not shuffle.isdigit():
        raise CheckFailed(f"configure(spark) does not set spark.sql.shuffle.partitions (set: {fake.conf.values})")
    if int(shuffle) != int(mod.SHUFFLE_PARTITIONS):
        raise CheckFailed(f"configure() sets {shuffle} shuffle partitions, SHUFFLE_PARTITIONS says {mod.SHUFFLE_PARTITIONS}")
    opts = {str(k): v for k, v in dict(mod.KAFKA_OPTIONS).items()}
    max_p = opts.get("maxPartitions")
    try:
        tasks = kafka_source_tasks(s["topic_partitions"], int(max_p) if max_p is not None else None)
        need = QueryShape(tasks, (int(shuffle),)).required_slots
    except (TypeError, ValueError) as exc:
        raise CheckFailed(f"maxPartitions={max_p!r}, shuffle partitions={shuffle!r}: {exc}") from None
    if need > s["slots"]:
        raise CheckFailed(f"the query still needs {need} task slots ({tasks} source + {shuffle} shuffle) on a "
                          f"{s['slots']}-slot cluster: CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT again")


CHILD_DRIVERS: dict[str, Callable] = {"pg_upsert": pg_upsert, "sink": sink, "slot_fix": slot_fix}


def run_child(name: str, answer_dir: Path, dsn: str = "", timeout: float = CHILD_TIMEOUT) -> tuple[bool, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT / "scripts"), str(_ROOT), env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run([sys.executable, "-m", "skillcheck.evals.drive", name, str(answer_dir.resolve()), dsn],
                              capture_output=True, text=True, timeout=timeout, env=env, cwd=str(answer_dir),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"{name}: the answer did not finish within {timeout:.0f} s (hang?)"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{\"passed\""):
            data = json.loads(line)
            if data.get("error"):
                raise GraderUnavailable(data["evidence"])
            return bool(data["passed"]), data["evidence"]
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return False, f"{name}: the answer's process ended (exit {proc.returncode}) without a verdict: {tail[:300]}"


def _child_main(argv: list[str]) -> int:
    name, answer_dir = argv[0], Path(argv[1])
    dsn = argv[2] if len(argv) > 2 else ""
    try:
        CHILD_DRIVERS[name](answer_dir, dsn)
        verdict = {"passed": True, "evidence": ""}
    except CheckFailed as exc:
        verdict = {"passed": False, "evidence": str(exc)}
    except GraderUnavailable as exc:
        verdict = {"passed": False, "evidence": f"grader could not run: {exc}", "error": True}
    except BaseException as exc:  # the answer raised where it must not, or failed to import
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(answer_dir) in f.filename]
        where = f" at solution.py:{frames[-1].lineno}" if frames else ""
        verdict = {"passed": False, "evidence": f"{type(exc).__name__}{where}: {str(exc)[:300]}"}
    sys.stdout.write("\n" + json.dumps(verdict) + "\n")
    sys.stdout.flush()
    return 0


# --- Spark drivers (in-process, on the lab session) ------------------------------------------------

def _run_rtm(spark, df, rows_in: list[dict], source, folder: Path, done: Callable[[list], bool],
             timeout: float = 45.0) -> list[dict]:
    """Run ``df`` in real-time mode into a JSON-lines foreach sink, feed ``rows_in``, poll until ``done(rows)``
    (or the timeout), then wait a little more so late extra rows show too."""
    from pack_lab.file_sink import JsonLinesForeachWriter, read_rows

    query = (df.writeStream.foreach(JsonLinesForeachWriter(folder)).outputMode("update")
             .option("checkpointLocation", str(folder) + "-cp").trigger(realTime="5 seconds").start())
    try:
        source.add(rows_in)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and query.isActive and not done(read_rows(folder)):
            time.sleep(0.2)
        time.sleep(1.5)
        if not query.isActive:
            raise CheckFailed(f"the query died: {str(query.exception())[:300]}")
        return read_rows(folder)
    finally:
        query.stop()


def broadcast_enrich(answer_dir: Path, spark, workdir: Path) -> None:
    """``enrich(events, accounts)`` on the real-time lab: key/value rows of the large payments of known accounts."""
    from pack_lab.rtm_lab import RealTimeMemorySource

    mod = load_module(answer_dir / "solution.py")
    accounts = spark.createDataFrame([("acc-1", "Ada", "GB"), ("acc-2", "Lin", "DE")], "account STRING, owner STRING, country STRING")
    source = RealTimeMemorySource(spark, "id STRING, account STRING, amount DOUBLE", num_partitions=2)
    df = mod.enrich(source.dataframe(), accounts)
    if sorted(df.columns) != ["key", "value"]:
        raise CheckFailed(f"enrich() returns columns {df.columns}, expected key and value")
    rows = [{"id": "p1", "account": "acc-1", "amount": 5000.0}, {"id": "p2", "account": "acc-2", "amount": 10.0},
            {"id": "p3", "account": "acc-9", "amount": 9000.0}, {"id": "p4", "account": "acc-2", "amount": 1000.5},
            {"id": "p5", "account": "acc-1", "amount": 1000.0}]
    want = [("p1", 5000.0, "Ada"), ("p4", 1000.5, "Lin")]

    def seen(out):
        got = []
        for r in out:
            try:
                value = json.loads(r["value"])
            except (TypeError, ValueError, KeyError):
                raise CheckFailed(f"value is not JSON: {r.get('value')!r}") from None
            got.append((r["key"], value.get("amount"), value.get("owner")))
        return sorted(got)

    got = seen(_run_rtm(spark, df, rows, source, workdir / "enrich", lambda out: len(out) >= len(want)))
    if got != want:
        raise CheckFailed(f"output rows (key, amount, owner) {got}, expected {want}")


def dedup_counts(answer_dir: Path, spark, workdir: Path) -> None:
    """``oss_unique_counts(events)`` on the real-time lab: distinct event_id per user, replays ignored."""
    from pack_lab.rtm_lab import RealTimeMemorySource

    mod = load_module(answer_dir / "solution.py")
    # Two shuffles: 2 source tasks + 1 + 1 shuffle partitions fit the lab's 4 slots.
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        source = RealTimeMemorySource(spark, "event_id STRING, user STRING", num_partitions=2)
        df = mod.oss_unique_counts(source.dataframe())
        rows = [{"event_id": f"e{i}", "user": f"u{i % 3}"} for i in range(12)]
        rows += [{"event_id": f"e{i}", "user": f"u{i % 3}"} for i in (0, 1, 2, 5)]  # retries of sent events
        count_col = next((c for c in df.columns if c != "user"), None)
        want = {"u0": 4, "u1": 4, "u2": 4}

        def counts(out):
            final: dict[str, int] = {}
            for r in out:
                final[r["user"]] = max(final.get(r["user"], 0), int(r[count_col]))
            return final

        final = counts(_run_rtm(spark, df, rows, source, workdir / "dedup", lambda out: sum(counts(out).values()) >= sum(want.values())))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    if final != want:
        raise CheckFailed(f"final counts per user {final}, expected {want} (duplicates must not count)")


SPARK_DRIVERS: dict[str, Callable] = {"broadcast_enrich": broadcast_enrich, "dedup_counts": dedup_counts}


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
