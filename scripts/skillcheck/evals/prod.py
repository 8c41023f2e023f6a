"""Production-property drivers: run an answer's ``foreach`` writer against a Postgres it owns and measure.

Each driver plays Spark's part of the ``foreach`` contract (:func:`drive.task`: a fresh unpickled copy of the
writer per task and epoch; ``open`` / ``process`` / ``close(error)``), starts its own throwaway Postgres inside
the sandbox, and judges behaviour only: exact table contents, which errors reached the caller and what they say,
connections seen in ``pg_stat_activity``, rows per second against a ``COPY`` baseline measured in the same run.
It never looks at how the writer is built. Bounds are generous (a loaded 2-core machine still meets them with the
reference answer) and far from what the known-wrong answers reach.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from .drive import _ROOT, CheckFailed, GraderUnavailable, _connect, _epoch, _row, load_module, restart_inside_epoch


@contextlib.contextmanager
def postgres() -> Iterator[Any]:
    """A throwaway Postgres inside the sandbox (restartable: ``server.restart()``)."""
    import sys

    sys.path.insert(0, str(_ROOT))
    from pack_lab.local_postgres import EmbeddedPostgres

    try:
        cm = EmbeddedPostgres(log=lambda _m: None)
        server = cm.__enter__()
    except Exception as exc:
        raise GraderUnavailable(f"embedded Postgres did not start: {str(exc)[:200]}") from None
    try:
        yield server
    finally:
        cm.__exit__(None, None, None)


def _writer_factory(answer_dir: Path, name: str, dsn: str, table: str) -> Callable[[], Any]:
    mod = load_module(answer_dir / "solution.py", "eval_prod_answer")
    make = getattr(mod, name)
    return lambda: make(dsn, table)


def _rows(dsn: str, sql: str) -> list[tuple]:
    with _connect(dsn) as c:
        return c.execute(sql).fetchall()


# --- type fidelity ---------------------------------------------------------------------------------

TYPES_TABLE = ("CREATE TABLE ledger (id text PRIMARY KEY, amount numeric(38,18), at timestamp(6), day date, "
               "ref uuid, doc jsonb, blob bytea, tags text[], note text, flag boolean, n bigint, ratio double precision)")


def _typed_rows() -> list:
    """Values as PySpark hands them to ``process()`` (DecimalType -> Decimal, TimestampType -> naive datetime,
    BinaryType -> bytearray, ArrayType(string) -> list, StringType for uuid and JSON)."""
    return [
        _row(id="t1", amount=Decimal("12345678901234567890.123456789012345678"),
             at=dt.datetime(2026, 11, 27, 9, 30, 1, 123456), day=dt.date(2026, 2, 28),
             ref="6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab", doc='{"a": [1, 2.5, "x"], "b": null, "c": {"d": "é"}}',
             blob=bytearray(b"\x00\xff\x10bin\x00"), tags=["a", "b,c", '"q"', "{x}"], note=None, flag=True,
             n=2 ** 62 + 1, ratio=0.1),
        _row(id="t2", amount=Decimal("-0.000000000000000001"), at=dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
             day=dt.date(1970, 1, 1), ref="00000000-0000-0000-0000-000000000000", doc='[]', blob=bytearray(b""),
             tags=[], note="", flag=False, n=-(2 ** 63), ratio=1e-300),
        _row(id="t3", amount=None, at=None, day=None, ref=None, doc=None, blob=None, tags=None, note=None, flag=None,
             n=None, ratio=None),
    ]


def types(answer_dir: Path, _dsn: str = "") -> None:
    """``LedgerWriter(dsn, table)``: every value of awkward Postgres types reads back exactly."""
    import json
    import uuid

    with postgres() as server:
        with _connect(server.dsn) as admin:
            admin.execute(TYPES_TABLE)
        make = _writer_factory(answer_dir, "LedgerWriter", server.dsn, "ledger")
        rows = _typed_rows()
        _epoch(make, 0, 0, rows)
        got = {r[0]: r for r in _rows(server.dsn, "SELECT id, amount, at, day, ref, doc, blob, tags, note, flag, n, "
                                                  "ratio FROM ledger")}
    for r in rows:
        if r["id"] not in got:
            raise CheckFailed(f"row {r['id']} was not written")
        have = dict(zip(("id", "amount", "at", "day", "ref", "doc", "blob", "tags", "note", "flag", "n", "ratio"),
                        got[r["id"]], strict=True))
        want = r.asDict()
        want["ref"] = None if want["ref"] is None else uuid.UUID(want["ref"])
        want["doc"] = None if want["doc"] is None else json.loads(want["doc"])
        want["blob"] = None if want["blob"] is None else bytes(want["blob"])
        have["blob"] = None if have["blob"] is None else bytes(have["blob"])
        for col, value in want.items():
            if have[col] != value or type(have[col]) is not type(value) and value is not None:
                raise CheckFailed(f"row {r['id']} column {col}: stored {have[col]!r}, sent {value!r}")


# --- bad rows named ------------------------------------------------------------------------------

BAD_TABLE = ("CREATE TABLE readings (id text PRIMARY KEY, sensor text NOT NULL, score double precision "
             "CHECK (score <> 'NaN'), note text)")


def bad_rows(answer_dir: Path, _dsn: str = "") -> None:
    """``ReadingsWriter(dsn, table)``: a row Postgres cannot store (a NUL byte, NaN against a CHECK, a key too big
    for the index) fails the task with an error naming that row's key; nothing is altered or dropped silently,
    earlier rows stay."""
    with postgres() as server:
        with _connect(server.dsn) as admin:
            admin.execute(BAD_TABLE)
        make = _writer_factory(answer_dir, "ReadingsWriter", server.dsn, "readings")
        good = [_row(id=f"ok-{i}", sensor="s1", score=float(i), note=f"n{i}") for i in range(5)]
        _epoch(make, 0, 0, good)
        state = {r[0]: r[1:] for r in _rows(server.dsn, "SELECT id, sensor, score, note FROM readings")}
        want = {r["id"]: (r["sensor"], r["score"], r["note"]) for r in good}
        if state != want:
            raise CheckFailed(f"good rows not written as sent: {sorted(state)[:5]}")
        cases = [("evt-nul-7", _row(id="evt-nul-7", sensor="s2", score=1.0, note="bad\x00byte"), "a NUL byte"),
                 ("evt-nan-3", _row(id="evt-nan-3", sensor="s2", score=float("nan"), note="nan"), "NaN"),
                 ("evt-huge-", _row(id="evt-huge-" + _incompressible(4000), sensor="s2", score=2.0, note="big key"),
                  "a key too big for the primary key's index")]
        for epoch, (needle, bad, what) in enumerate(cases, 1):
            batch = [_row(id=f"e{epoch}-a", sensor="s3", score=3.0, note="before"), bad,
                     _row(id=f"e{epoch}-b", sensor="s3", score=4.0, note="after")]
            try:
                _epoch(make, 0, epoch, batch)
            except CheckFailed:
                raise
            except Exception as exc:
                text = " | ".join(str(e) for e in _chain(exc))
                if needle not in text:
                    raise CheckFailed(f"the row with {what} failed the task, but the error does not name its key "
                                      f"{needle!r}: {text[:200]!r}") from None
            else:
                raise CheckFailed(f"the row with {what} (key {needle}...) did not fail the task: an error was "
                                  "swallowed or the value silently altered")
            stored = _rows(server.dsn, f"SELECT id, note FROM readings WHERE id LIKE '{needle}%'")
            if stored:
                raise CheckFailed(f"the rejected row {needle} was stored altered: {str(stored[0])[:80]}")
            state = {r[0]: r[1:] for r in _rows(server.dsn, "SELECT id, sensor, score, note FROM readings "
                                                            "WHERE id LIKE 'ok-%'")}
            if state != want:
                raise CheckFailed(f"after the row with {what}: earlier rows changed")


def _incompressible(n: int) -> str:
    """Text Postgres cannot compress below the btree limit (about 2,700 bytes per index row)."""
    import random
    import string

    return "".join(random.Random(7).choices(string.ascii_letters + string.digits, k=n))


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


# --- connection cap -------------------------------------------------------------------------------

CAP_TASKS, CAP_EPOCHS, CAP_ROWS = 6, 4, 600


def _cap_worker(make: Callable[[], Any], partition: int, errors: Any) -> None:
    """One Python worker of an executor: the tasks of its partition, one epoch after another."""
    try:
        for epoch in range(CAP_EPOCHS):
            rows = [_row(id=f"p{partition}-{i}", version=epoch, payload=f"e{epoch}") for i in range(CAP_ROWS)]
            _epoch(make, partition, epoch, rows)
            time.sleep(0.2)
    except BaseException as exc:  # reported to the grader
        errors.put(f"partition {partition}: {type(exc).__name__}: {str(exc)[:200]}")
    finally:
        os._exit(0)


def connection_cap(answer_dir: Path, _dsn: str = "") -> None:
    """``EventsWriter(dsn, table)`` in 6 Python workers (one per sink task), 4 epochs each: ``pg_stat_activity``
    never shows more than 6 client connections (one per concurrent task), and the table is exact."""
    with postgres() as server:
        with _connect(server.dsn) as admin:
            admin.execute("CREATE TABLE events (id text PRIMARY KEY, version bigint NOT NULL, payload text)")
        make = _writer_factory(answer_dir, "EventsWriter", server.dsn, "events")
        ctx = multiprocessing.get_context("fork")
        errors = ctx.Queue()
        peak, samples, stop = [0], [0], threading.Event()

        def sample() -> None:
            with _connect(server.dsn) as c:
                while not stop.is_set():
                    n = c.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                  "AND pid <> pg_backend_pid()").fetchone()[0]
                    peak[0] = max(peak[0], n)
                    samples[0] += 1
                    time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        workers = [ctx.Process(target=_cap_worker, args=(make, p, errors)) for p in range(CAP_TASKS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(180)
        time.sleep(0.3)
        stop.set()
        sampler.join(10)
        for w in workers:
            if w.is_alive():
                w.kill()
                raise CheckFailed("a sink task did not finish within 180 s")
        if not errors.empty():
            raise CheckFailed(f"a sink task failed: {errors.get()}")
        rows = _rows(server.dsn, "SELECT count(*), min(version), max(version) FROM events")[0]
    if rows != (CAP_TASKS * CAP_ROWS, CAP_EPOCHS - 1, CAP_EPOCHS - 1):
        raise CheckFailed(f"table holds (rows, min version, max version) = {rows}, expected "
                          f"{(CAP_TASKS * CAP_ROWS, CAP_EPOCHS - 1, CAP_EPOCHS - 1)}")
    if peak[0] > CAP_TASKS:
        raise CheckFailed(f"pg_stat_activity showed {peak[0]} client connections of the sink at once "
                          f"({samples[0]} samples); the cap is {CAP_TASKS} (one per concurrent sink task)")


# --- throughput floor -----------------------------------------------------------------------------

THROUGHPUT_ROWS = 30_000
#: The writer must reach this share of a plain ``COPY`` of the same rows measured in the same sandbox just before.
THROUGHPUT_SHARE = 0.08


def throughput(answer_dir: Path, _dsn: str = "") -> str:
    """``EventsWriter(dsn, table)``: one task of 30,000 upserts reaches at least 8 % of the rows per second of a
    ``COPY`` of the same rows into the same server (the ratio holds on a loaded machine; per-row statements reach
    a few per cent)."""
    payload = "p" * 80
    rows = [_row(id=f"k{i:06d}", version=1, payload=payload) for i in range(THROUGHPUT_ROWS)]
    with postgres() as server:
        with _connect(server.dsn) as admin:
            admin.execute("CREATE TABLE events (id text PRIMARY KEY, version bigint NOT NULL, payload text)")
            admin.execute("CREATE TABLE baseline (id text PRIMARY KEY, version bigint NOT NULL, payload text)")
            started = time.perf_counter()
            with admin.cursor().copy("COPY baseline (id, version, payload) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row((r["id"], r["version"], r["payload"]))
            copy_rate = THROUGHPUT_ROWS / (time.perf_counter() - started)
        make = _writer_factory(answer_dir, "EventsWriter", server.dsn, "events")
        writer = pickle.loads(pickle.dumps(make()))
        started = time.perf_counter()
        deadline = started + 120
        if not writer.open(0, 0):
            raise CheckFailed("open(0, 0) returned a falsy value: Spark would skip these rows silently")
        try:
            for i, r in enumerate(rows):
                writer.process(r)
                if i % 1000 == 0 and time.perf_counter() > deadline:
                    raise CheckFailed(f"only {i} of {THROUGHPUT_ROWS} rows processed in 120 s "
                                      f"(COPY: {copy_rate:,.0f} rows/s)")
        except BaseException as exc:
            writer.close(exc)
            raise
        writer.close(None)
        rate = THROUGHPUT_ROWS / (time.perf_counter() - started)
        count = _rows(server.dsn, "SELECT count(*) FROM events")[0][0]
    if count != THROUGHPUT_ROWS:
        raise CheckFailed(f"{count} of {THROUGHPUT_ROWS} rows in the table after close()")
    measured = f"{rate:,.0f} rows/s is {rate / copy_rate:.1%} of COPY's {copy_rate:,.0f} rows/s on the same server"
    if rate < THROUGHPUT_SHARE * copy_rate:
        raise CheckFailed(f"{measured}; the floor is {THROUGHPUT_SHARE:.0%}")
    return measured


# --- exact through replays, a killed task and a restart ----------------------------------------------------

def _killed_task(make: Callable[[], Any], partition: int, epoch: int, rows: list, after: int) -> None:
    """A task whose executor dies after ``after`` rows: no close(), the process just ends."""
    ctx = multiprocessing.get_context("fork")

    def run() -> None:
        writer = pickle.loads(pickle.dumps(make()))
        if writer.open(partition, epoch):
            for r in rows[:after]:
                writer.process(r)
            time.sleep(0.5)  # a timed flush may land part of it
        os._exit(137)

    p = ctx.Process(target=run)
    p.start()
    p.join(60)
    if p.is_alive():
        p.kill()


def ledger(answer_dir: Path, _dsn: str = "") -> None:
    """``PaymentsWriter(dsn, table)`` on an append-only ledger (primary key event_id): an epoch replayed with
    another split, a task killed mid-epoch then retried, a Postgres restart inside an epoch: every payment is in
    the table exactly once, with the amount first written."""
    with postgres() as server:
        dsn = server.dsn
        with _connect(dsn) as admin:
            admin.execute("CREATE TABLE payments (event_id text PRIMARY KEY, account text NOT NULL, "
                          "amount numeric(18,2) NOT NULL)")
        make = _writer_factory(answer_dir, "PaymentsWriter", dsn, "payments")

        def pay(i: int) -> Any:
            return _row(event_id=f"pay-{i:04d}", account=f"acc-{i % 7}", amount=Decimal(f"{i}.{i % 100:02d}"))

        expected: dict[str, Decimal] = {}

        def expect(after: str) -> None:
            got = {r[0]: r[1] for r in _rows(dsn, "SELECT event_id, amount FROM payments")}
            if got != expected:
                extra = sorted(set(got) - set(expected))[:3]
                missing = sorted(set(expected) - set(got))[:3]
                wrong = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])[:3]
                raise CheckFailed(f"after {after}: missing {missing}, unexpected {extra}, changed amounts {wrong}")

        epoch0 = [pay(i) for i in range(40)]
        _epoch(make, 0, 0, epoch0[:20])
        _epoch(make, 1, 0, epoch0[20:])
        expected.update({r["event_id"]: r["amount"] for r in epoch0})
        expect("the first epoch")
        _epoch(make, 0, 0, epoch0[::2])  # the same epoch replayed after a failure, split differently
        _epoch(make, 1, 0, epoch0[1::2])
        expect("a replay of the epoch with another split")

        epoch1 = [pay(i) for i in range(40, 100)]
        _killed_task(make, 0, 1, epoch1, after=35)
        _epoch(make, 0, 1, epoch1)  # Spark retries the task
        expected.update({r["event_id"]: r["amount"] for r in epoch1})
        expect("a task killed mid-epoch and its retry")

        epoch2 = [pay(i) for i in range(100, 140)]
        expected.update({r["event_id"]: r["amount"] for r in epoch2})
        restart_inside_epoch(make, server, 0, 2, epoch2, expect)


# --- sink-visible latency under real-time mode (Spark) ------------------------------------------------------

#: The latency task (evals.json ``prod-rtm-latency-p99``): the rate, the measured window after the first row is
#: visible (start-up excluded: a loaded machine may take tens of seconds to start the query), the bound.
LATENCY_RATE, LATENCY_WARMUP_S, LATENCY_WINDOW_S, LATENCY_P99_MS = 100, 3, 8, 1500
LATENCY_START_TIMEOUT_S, LATENCY_DRAIN_S = 120, 20


def latency_source(spark: Any, rows_per_second: int, total_rows: int, start_ms: int) -> Any:
    """The stream the latency task's answer receives: ``id BIGINT, sent_ms BIGINT, payload STRING``, row ``i``
    due at ``start_ms + i * 1000 / rate``. Today the lab's deterministic rate source; a Kafka topic fed at the
    same pace can take its place here without touching the answers (they only see the DataFrame)."""
    import sys

    sys.path.insert(0, str(_ROOT))
    from pack_lab.rate_source import rate_stream

    return rate_stream(spark, rows_per_second=rows_per_second, total_rows=total_rows, start_ms=start_ms,
                       payload="x" * 60, num_partitions=1)


def latency(answer_dir: Path, spark: Any, workdir: Path) -> str:
    """``start(df, dsn, table, checkpoint)``: a real-time query from the rate source (100 rows/s) into Postgres
    table ``events``. Once the first row is visible (and 3 s more), every row sent in the next 8 s must be
    visible, and the p99 of (commit time - sent time) over them stays under 1.5 s. Commit times come from
    ``track_commit_timestamp`` on the grader's own Postgres (pack_lab/sink_clock.py)."""
    import sys

    sys.path.insert(0, str(_ROOT))
    from pack_lab.local_postgres import EmbeddedPostgres
    from pack_lab.sink_clock import SERVER_SETTINGS, WRITTEN_MS_COLUMN, visible_clock

    mod = load_module(answer_dir / "solution.py", "eval_latency_answer")
    try:
        cm = EmbeddedPostgres(settings=SERVER_SETTINGS, log=lambda _m: None)
        server = cm.__enter__()
    except Exception as exc:
        raise GraderUnavailable(f"embedded Postgres did not start: {str(exc)[:200]}") from None
    query = None
    rate = LATENCY_RATE
    try:
        with _connect(server.dsn) as admin:
            admin.execute("CREATE TABLE events (id bigint PRIMARY KEY, sent_ms bigint NOT NULL, payload text, "
                          f"{WRITTEN_MS_COLUMN})")
            clock, _name = visible_clock(admin)
        start_ms = int(time.time() * 1000) + 3000
        total = rate * (LATENCY_START_TIMEOUT_S + LATENCY_WARMUP_S + LATENCY_WINDOW_S + 30)
        query = mod.start(latency_source(spark, rate, total, start_ms), server.dsn, "events",
                          str(workdir / "latency-cp"))

        def alive() -> None:
            if query is not None and hasattr(query, "isActive") and not query.isActive:
                raise CheckFailed(f"the query stopped: {str(query.exception())[:300]}")

        deadline = time.time() + LATENCY_START_TIMEOUT_S
        while not _rows(server.dsn, "SELECT exists (SELECT 1 FROM events)")[0][0]:
            alive()
            if time.time() > deadline:
                raise CheckFailed(f"no row visible in Postgres {LATENCY_START_TIMEOUT_S} s after start()")
            time.sleep(0.2)
        w0 = int(time.time() * 1000) + LATENCY_WARMUP_S * 1000
        w1 = w0 + LATENCY_WINDOW_S * 1000
        first = -(-(w0 - start_ms) * rate // 1000)
        last = (w1 - start_ms) * rate // 1000
        want = last - first + 1
        deadline = w1 / 1000 + LATENCY_DRAIN_S
        while time.time() < deadline:
            alive()
            if time.time() * 1000 > w1 and _rows(server.dsn, f"SELECT count(*) FROM events WHERE id BETWEEN {first} "
                                                             f"AND {last}")[0][0] >= want:
                break
            time.sleep(0.5)
        rows = _rows(server.dsn, f"SELECT id, {clock} - sent_ms FROM events WHERE id BETWEEN {first} AND {last} "
                                 "ORDER BY 2")
    finally:
        with contextlib.suppress(Exception):
            if query is not None:
                query.stop()
        cm.__exit__(None, None, None)
    if len(rows) != want:
        raise CheckFailed(f"{len(rows)} of the {want} rows sent in the measured {LATENCY_WINDOW_S} s were visible in "
                          f"Postgres {LATENCY_DRAIN_S} s after the last was sent")
    lat = [r[1] for r in rows]
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    measured = f"sink-visible latency p50 {p50} ms, p99 {p99} ms over {want} rows at {rate} rows/s"
    if p99 > LATENCY_P99_MS:
        raise CheckFailed(f"{measured}: the bound is p99 <= {LATENCY_P99_MS} ms")
    return measured


# --- a checkpoint that can move from micro-batch to real-time mode (Spark) -------------------------------------

class _RecordedConf:
    """``spark.conf`` for the answer's ``configure(spark)``: sets go to the session and the values they replaced
    are remembered, so :meth:`restore` puts the shared lab session back as it was for the next answer."""

    def __init__(self, conf: Any):
        self._conf, self.previous = conf, {}

    def _remember(self, key: str) -> None:
        if key not in self.previous:
            self.previous[key] = self._conf.get(key, None)

    def set(self, key: str, value: Any) -> None:
        self._remember(str(key))
        self._conf.set(key, value)

    def get(self, *args: Any) -> Any:
        return self._conf.get(*args)

    def unset(self, key: str) -> None:
        self._remember(str(key))
        self._conf.unset(key)

    def restore(self) -> None:
        for key, value in self.previous.items():
            with contextlib.suppress(Exception):
                self._conf.unset(key) if value is None else self._conf.set(key, value)


class _SparkWithRecordedConf:
    def __init__(self, spark: Any):
        self._spark, self.conf = spark, _RecordedConf(spark.conf)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)


def checkpoint_switch(answer_dir: Path, spark: Any, workdir: Path) -> None:
    """``configure(spark)`` then ``counts(events)``: the count per key runs in micro-batch on a checkpoint, then
    the same query restarts in real-time mode on that checkpoint and its counts continue (no error, no state
    lost, no row counted twice)."""
    import sys

    sys.path.insert(0, str(_ROOT))
    from pack_lab.file_sink import JsonLinesForeachWriter, read_rows, wait_for_rows
    from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
    from pack_lab.rtm_probe import run_and_classify

    mod = load_module(answer_dir / "solution.py", "eval_switch_answer")
    proxy = _SparkWithRecordedConf(spark)
    try:
        mod.configure(proxy)
        source = RealTimeMemorySource(spark, "event_id STRING, k STRING", num_partitions=2)
        df = mod.counts(source.dataframe())
        count_col = next((c for c in df.columns if c != "k"), None)
        if "k" not in df.columns or count_col is None:
            raise CheckFailed(f"counts() returns columns {df.columns}; expected k and a count")
        checkpoint = str(workdir / "switch-cp")
        first = (df.writeStream.foreach(JsonLinesForeachWriter(workdir / "mb")).outputMode("update")
                 .trigger(processingTime="1 second").option("checkpointLocation", checkpoint).start())
        try:
            source.add([{"event_id": "e1", "k": "a"}, {"event_id": "e2", "k": "a"}, {"event_id": "e3", "k": "b"}])
            wait_for_rows(workdir / "mb", 2, timeout=60, query=first)
            time.sleep(2)  # let the batch commit
        finally:
            first.stop()
        writer = (df.writeStream.foreach(JsonLinesForeachWriter(workdir / "rt")).outputMode("update")
                  .trigger(realTime=MIN_REAL_TIME_TRIGGER).option("checkpointLocation", checkpoint))

        def final() -> dict:
            out: dict[str, int] = {}
            for r in read_rows(workdir / "rt"):
                out[r["k"]] = max(out.get(r["k"], 0), int(r[count_col]))
            return out

        outcome = run_and_classify(start=writer.start, feed=lambda _q: source.add([{"event_id": "e4", "k": "a"}]),
                                   until=lambda: final().get("a", 0) >= 3, timeout=60)
    finally:
        proxy.conf.restore()
    if outcome.status != "accepted":
        raise CheckFailed(f"the real-time restart on the micro-batch checkpoint failed: "
                          f"{outcome.error_class or outcome.status}: {str(outcome.message)[:200]}")
    if final().get("a") != 3:
        raise CheckFailed(f"after the switch the count of key a is {final().get('a')}, expected 3 (state kept)")
