"""Benchmark: the seed's workload here — Kafka → Spark → Postgres at 10,000 rows/s on one 2-core machine.

The sizing demo this pack grew from ran Kafka → real-time mode → Lakebase at about
10,000 rows/s on Databricks (8 Kafka partitions, eight 4-core workers, a 2 CU Lakebase) and
reported end-to-end p50 225 ms and p95 356 ms. This benchmark runs the same shape on one
machine: a local Kafka broker (``pack_lab.kafka_broker``), Spark in local mode and Postgres,
all on the same cores, for three sink paths, one after the other in one run:

* ``rtm-jvm`` — real-time mode, the JVM sink (``rtm_lakebase.jvm.sink``);
* ``rtm-fast-foreach`` — real-time mode, the pack's ``PostgresForeachWriter`` through
  ``rtm_lakebase.foreach`` (rows handed to the Python worker as they come);
* ``microbatch`` — micro-batch with a 0 s trigger, the same Python writer through stock
  ``writeStream.foreach``.

Per path, on a fresh topic and table each time:

1. **capacity** — a backlog of rows is produced first, then the query starts from the earliest
   offset; rows landed per second while it drains is the most the path moves here;
2. **paced run at the target** (10,000 rows/s): a separate producer JVM (the lab's ``KafkaLab``)
   sends rows at the rate; each row's Kafka timestamp (set by the producer when it sends) is its
   produce time. Sink-visible latency is the Postgres commit time of the row minus that
   (``pack_lab.sink_clock``), as nearest-rank p50/p95/p99. A path that moves fewer rows than arrive
   piles them up, so its latency grows during the run: the sustained rate is the offered rate over
   (1 + the slope of latency against produce time), and the run is *sustained* when every row
   landed and that rate is at least 95 % of the offered one;
3. if the target was not sustained, a **paced run at the highest rate that can be**: 90 % of the
   measured capacity, rounded down to 500 rows/s, checked the same way.

Each paced run records CPU seconds per group of processes (Spark JVM and its Python workers, the
broker, Postgres, the producer) and per thread (``pack_lab.cpu_profile``, like ``top -H``), CPU
seconds per 1,000 rows, the whole machine's busy share, and the load average, and names the
bottleneck from that profile. Run::

    nice -n 10 .venv/bin/python benchmarks/kafka_workload.py          # full run, a few minutes
    .venv/bin/python benchmarks/kafka_workload.py --quick --output /tmp/k.json   # smoke run, ~2 min

Results: ``benchmarks/results/kafka_workload.json`` and ``kafka_workload.png``
(drawn by ``benchmarks/charts.py``). ``KAFKA_BOOTSTRAP`` / ``PG_DSN`` point it at your own broker or
Postgres (their CPU is then not on this machine's profile).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "kafka_workload.json"
PATHS = ("rtm-jvm", "rtm-fast-foreach", "microbatch")
#: The seed's figures (Databricks; see references/real-time-mode.md for the source and set-up).
SEED = {"rate": 10_000, "p50_ms": 225, "p95_ms": 356, "kafka_partitions": 8,
        "compute": "Databricks classic cluster, DBR 17.3 LTS+, driver and 8 workers of 4 cores (32 GB) each",
        "sink": "Lakebase Postgres, 2 CU, Python foreach writer with batched writes",
        "trigger": "realTime 5 minutes"}
TARGET_RATE = 10_000
#: Cores of the local Spark (the machine's two; the broker and Postgres share them).
CORES = 2
#: A run is sustained when every row landed and the sustained rate is this share of the offered one.
SUSTAINED_SHARE = 0.95
#: The rate tried when the target is not sustained: this share of the measured capacity.
FALLBACK_SHARE = 0.9
#: The producer's pacing tick.
TICK_S = 0.01
PAD = "x" * 64  # about 80 bytes a record, like the lab's other benchmarks

Log = Callable[[str], None]


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Producer:
    """The lab's ``KafkaLab produce`` in its own JVM, fed one line per record on stdin, paced here."""

    def __init__(self, bootstrap: str, topic: str):
        from pack_lab.kafka_broker import broker_classpath, java_binary
        from pack_lab.kafka_topics import CLIENT_JAR, kafka_jars

        if not CLIENT_JAR.is_file():
            kafka_jars()  # raises saying how to build it
        classpath = os.pathsep.join((str(CLIENT_JAR), broker_classpath()))
        self.process = subprocess.Popen(
            [java_binary(), "-Xmx128m", "-XX:+UseSerialGC", "-cp", classpath, "rtm.lab.KafkaLab", "produce",
             bootstrap, topic], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.sent = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, first_id: int, count: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("".join(f"k{i % 4096}\t{i},{PAD}\n" for i in range(first_id, first_id + count)))
        self.process.stdin.flush()
        self.sent += count

    def pace(self, rate: int, seconds: float, progress: Callable[[int], None]) -> tuple[int, float]:
        """Send ``round(rate * seconds)`` rows (ids from 0), ``rate`` a second; returns ``(rows, seconds)``."""
        total = int(round(rate * seconds))
        start = time.monotonic()
        next_tick, next_progress, sent = start, start + 5.0, 0
        while sent < total:
            now = time.monotonic()
            due = min(int((now - start) * rate) + 1, total) - sent
            if due > 0:
                self.send(sent, due)
                sent += due
            if now >= next_progress:
                progress(sent)
                next_progress = now + 5.0
            next_tick += TICK_S
            time.sleep(max(0.0, next_tick - time.monotonic()))
        return sent, time.monotonic() - start

    def close(self, timeout: float = 120.0) -> int:
        """Flush and stop; returns how many records the producer acknowledged."""
        try:
            out, err = self.process.communicate(timeout=timeout)  # closes stdin: the producer flushes and exits
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"the producer did not finish within {timeout:.0f} s") from None
        if self.process.returncode != 0:
            raise RuntimeError(f"the producer failed: {err.strip()[-300:]}")
        return int(out.strip().splitlines()[-1]) if out.strip() else 0

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def kafka_frame(spark, bootstrap: str, topic: str):
    """``id``, ``sent_ms`` (the record's Kafka timestamp) and the engine clock ``plan_ms``, from ``topic``."""
    from pyspark.sql import functions as F

    from pack_lab.latency_probe import with_plan_time

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").load())
    return with_plan_time(raw.select(
        F.split(F.col("value").cast("string"), ",").getItem(0).cast("long").alias("id"),
        F.expr("unix_millis(timestamp)").alias("sent_ms")))


def _count(conn, table: str, where: str = "id >= 0") -> int:
    from psycopg import sql

    return conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE " + where).format(sql.Identifier(table))).fetchone()[0]


def postmaster_pid(conn) -> int | None:
    """The local Postgres server's pid (its ``postmaster.pid``), or None when it is not readable here."""
    with contextlib.suppress(Exception):
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]
        return int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    return None


class Bench:
    """One run's shared pieces: Spark, the broker address, Postgres, and the settings."""

    def __init__(self, spark, bootstrap: str, dsn: str, *, partitions: int, trigger: str, dwell_ms: int,
                 batch_rows: int, broker_pid: int | None, log: Log = _log):
        self.spark, self.bootstrap, self.dsn = spark, bootstrap, dsn
        self.partitions, self.trigger, self.dwell_ms, self.batch_rows = partitions, trigger, dwell_ms, batch_rows
        self.broker_pid, self.log = broker_pid, log

    def topics(self):
        from pack_lab.kafka_topics import KafkaTopics

        return KafkaTopics(self.bootstrap, self.spark)

    @contextlib.contextmanager
    def point(self, path: str, label: str):
        """A fresh topic, table and checkpoint; yields ``(topic, table, conn, start_query)``."""
        import psycopg
        from psycopg import sql

        from benchmarks.rate_sweep import start_query, table_ddl

        stamp = f"{path.replace('-', '_')}_{label}_{uuid.uuid4().hex[:8]}"
        topic, table = f"bench_{stamp}", f"kafka_workload_{stamp}"
        self.topics().create(topic, self.partitions)
        with contextlib.ExitStack() as cleanup:
            conn = cleanup.enter_context(psycopg.connect(self.dsn, autocommit=True, connect_timeout=10))
            cleanup.callback(lambda: conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table))))
            conn.execute(table_ddl(table))
            checkpoint = tempfile.mkdtemp(prefix="kafka-workload-checkpoint-")
            cleanup.callback(shutil.rmtree, checkpoint, True)
            queries = []

            def start():
                df = kafka_frame(self.spark, self.bootstrap, topic)
                query = start_query(path, df, self.dsn, table, checkpoint, self.trigger, self.dwell_ms,
                                    self.batch_rows)
                queries.append(query)
                return query

            cleanup.callback(lambda: [q.stop() for q in queries if q.isActive])
            yield topic, table, conn, start

    def groups(self, producer_pid: int | None, pg_pid: int | None) -> dict[str, list[int]]:
        from benchmarks.rate_sweep import spark_pid

        groups = {"spark (JVM + Python workers)": [spark_pid(self.spark)], "benchmark driver": [os.getpid()]}
        if self.broker_pid:
            groups["kafka broker"] = [self.broker_pid]
        if pg_pid:
            groups["postgres"] = [pg_pid]
        if producer_pid:
            groups["producer"] = [producer_pid]
        return groups

    def capacity(self, path: str, rows: int, timeout: float) -> dict[str, Any]:
        """Produce ``rows`` first, then start the query from the earliest offset; rows/s while it drains."""
        from psycopg import sql

        from benchmarks.rate_sweep import wait_landed
        from pack_lab.sink_clock import visible_clock

        with self.point(path, "capacity") as (topic, table, conn, start):
            producer = Producer(self.bootstrap, topic)
            try:
                producer.send(0, rows)
                acked = producer.close()
            finally:
                producer.kill()
            self.log(f"  {path}: backlog of {acked} rows produced; draining it")
            query = start()
            landed = wait_landed(conn, table, query, acked, timeout=timeout, poll=0.25)
            query.stop()
            clock, _ = visible_clock(conn)
            first, last = conn.execute(sql.SQL("SELECT min(" + clock + "), max(" + clock + ") FROM {}")
                                       .format(sql.Identifier(table))).fetchone()
        if not landed:
            return {"rows": acked, "rows_landed": 0, "rows_per_s": 0.0, "error": "no row landed"}
        seconds = max((last - first) / 1000, 1e-3)
        return {"rows": acked, "rows_landed": landed, "seconds": round(seconds, 3),
                "rows_per_s": round((landed - 1) / seconds, 1), "drained": landed >= acked,
                "measured": "rows landed over the seconds from the first commit to the last"}

    def paced(self, path: str, rate: int, seconds: float, warmup: float) -> dict[str, Any]:
        """One paced run at ``rate`` rows/s: latency, sustained rate, CPU and the profile."""

        from benchmarks.rate_sweep import landed_rows, wait_landed
        from pack_lab.cpu_profile import CpuSnapshot
        from pack_lab.latency_probe import summarize

        with self.point(path, str(rate)) as (topic, table, conn, start):
            query = start()
            producer = Producer(self.bootstrap, topic)
            try:
                producer.send(-1, 1)  # warm-up row (id -1, left out): connections, workers, the first task
                deadline = time.monotonic() + warmup
                while not _count(conn, table, "id < 0"):
                    if not query.isActive:
                        raise RuntimeError(f"query died during warm-up: {str(query.exception()).splitlines()[0]}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the warm-up row did not land within {warmup:.0f} s")
                    time.sleep(0.1)
                groups = self.groups(producer.pid, postmaster_pid(conn))
                before = CpuSnapshot.take(groups)
                load_start = os.getloadavg()[0]
                sent, fed_s = producer.pace(rate, seconds, lambda n: self.log(
                    f"  {path} @ {rate}/s: sent {n}, landed {_count(conn, table)}"))
                fed = CpuSnapshot.take(groups)  # the producer exits at close(): its CPU is read here
                acked = producer.close() - 1
            finally:
                producer.kill()
            wait_landed(conn, table, query, acked, timeout=max(30.0, seconds))
            profile = CpuSnapshot.take(groups).carry(fed, "producer").since(before)
            query.stop()
            rows, clock_name = landed_rows(conn, table)
        visible = [r[2] - r[0] for r in rows]
        engine = [r[1] - r[0] for r in rows if r[1] is not None]
        offered = round(sent / fed_s, 1) if fed_s else 0.0
        growth = latency_growth([r[0] for r in rows], visible)
        sustained = round(offered / (1 + max(growth, 0.0)), 1)
        cpu_s = sum(s for g, s in profile["cpu_s_by_group"].items() if g != "benchmark driver")
        spark_cpu = profile["cpu_s_by_group"].get("spark (JVM + Python workers)", 0.0)
        return {
            "rate": rate, "seconds": round(fed_s, 2), "rows_sent": sent, "rows_acked": acked,
            "rows_landed": len(rows), "offered_rows_per_s": offered, "sustained_rows_per_s": sustained,
            "latency_growth_ms_per_s": round(growth * 1000, 1),
            "sustained": len(rows) == acked == sent and sustained >= SUSTAINED_SHARE * offered,
            "visible": summarize(visible), "engine": summarize(engine), "clock": clock_name,
            "cpu_s_per_1000_rows": round(cpu_s / len(rows) * 1000, 3) if rows else None,
            "spark_cpu_s_per_1000_rows": round(spark_cpu / len(rows) * 1000, 3) if rows else None,
            "profile": profile,
            "load_average_1m": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        }


def latency_growth(sent_ms: list[int], latency_ms: list[int]) -> float:
    """Least-squares slope of latency against produce time (ms per ms).

    A path that moves ``C`` rows/s while ``R`` arrive piles up ``R - C`` rows a second, so a row
    produced ``t`` seconds in waits about ``t (R - C) / C`` longer: the slope is ``R / C - 1`` and
    ``C = R / (1 + slope)``. A path that keeps up has a slope near 0 (its latency does not grow).
    """
    n = len(sent_ms)
    if n < 2:
        return 0.0
    mean_x, mean_y = sum(sent_ms) / n, sum(latency_ms) / n
    var = sum((x - mean_x) ** 2 for x in sent_ms)
    if var == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(sent_ms, latency_ms, strict=True)) / var


def bottleneck(run: dict[str, Any]) -> str:
    """A sentence naming what limited a paced run, read from its profile."""
    prof = run["profile"]
    busy = prof.get("machine_busy_share")
    groups = ", ".join(f"{g} {c:.2f}" for g, c in list(prof["cores_used_by_group"].items())[:4])
    hot = prof["hottest_threads"][0] if prof["hottest_threads"] else None
    threads = "; ".join(f"{t['thread']} ({t['process']}, {t['group']}) {t['cores']:.2f}"
                        for t in prof["hottest_threads"][:3])
    ours = sum(prof["cores_used_by_group"].values())
    if busy is not None and busy >= 0.9 and ours < 0.6 * busy * prof["cores"]:
        return (f"other jobs: the machine's {prof['cores']} cores were {busy:.0%} busy but this workload used only "
                f"{ours:.2f} cores ({groups}); the run does not show the workload's own limit")
    if busy is not None and busy >= 0.9:
        return (f"CPU: the machine's {prof['cores']} cores were {busy:.0%} busy, {ours:.2f} cores of it this "
                f"workload's ({groups}); busiest threads: {threads}")
    if hot and hot["cores"] >= 0.85:
        return (f"one thread: {hot['thread']} in {hot['process']} ({hot['group']}) used {hot['cores']:.2f} of a "
                f"core while the machine was {busy:.0%} busy (cores used: {groups})")
    return (f"neither the cores ({busy:.0%} busy; cores used: {groups}) nor one thread (busiest: {threads}) "
            "was saturated")


def run_path(bench: Bench, path: str, *, rate: int, seconds: float, backlog: int, warmup: float,
             log: Log = _log) -> dict[str, Any]:
    result: dict[str, Any] = {"path": path, "runs": []}
    log(f"{path}: capacity (a backlog of {backlog} rows)")
    try:
        result["capacity"] = bench.capacity(path, backlog, timeout=max(60.0, backlog / 500))
        log(f"  {path}: capacity {result['capacity']['rows_per_s']:.0f} rows/s")
    except Exception as exc:
        result["capacity"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        log(f"  {path}: capacity failed: {result['capacity']['error']}")
    rates = [rate]
    for attempt in range(2):
        this = rates[attempt]
        log(f"{path}: paced at {this} rows/s for {seconds:g} s")
        try:
            run = bench.paced(path, this, seconds, warmup)
        except Exception as exc:
            result["runs"].append({"rate": this, "error": f"{type(exc).__name__}: {exc}"[:300]})
            log(f"  {path} @ {this}: failed: {result['runs'][-1]['error']}")
            break
        run["bottleneck"] = bottleneck(run)
        result["runs"].append(run)
        vis = run["visible"]
        log(f"  {path} @ {this}: {run['rows_landed']}/{run['rows_sent']} rows, sustained "
            f"{run['sustained_rows_per_s']:.0f}/s ({'kept up' if run['sustained'] else 'fell behind'}), visible "
            f"p50 {vis.get('p50', '-')} p95 {vis.get('p95', '-')} p99 {vis.get('p99', '-')} ms, "
            f"{run['cpu_s_per_1000_rows']} CPU s/1k rows")
        log(f"  bottleneck: {run['bottleneck']}")
        capacity = result["capacity"].get("rows_per_s") or 0.0
        fallback = int(min(capacity * FALLBACK_SHARE, this * FALLBACK_SHARE) // 500 * 500)
        if run["sustained"] or attempt == 1 or fallback < 500:
            break
        rates.append(fallback)
    sustained = [r for r in result["runs"] if r.get("sustained")]
    result["highest_sustained_rate"] = max((r["rate"] for r in sustained), default=None)
    return result


def machine_info(spark, bootstrap_external: bool, dsn_external: bool) -> dict[str, Any]:
    import pyspark

    from pack_lab.kafka_connector import jar_name
    from pack_lab.maven_jars import KAFKA_VERSION

    return {"cores": os.cpu_count(), "spark_master": spark.sparkContext.master,
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "kafka": "external (KAFKA_BOOTSTRAP)" if bootstrap_external else KAFKA_VERSION,
            "spark_kafka_connector": jar_name(pyspark.__version__),
            "postgres": "external (PG_DSN)" if dsn_external else "local throwaway server",
            "system": f"{platform.system()} {platform.machine()}",
            "load_average_1m_at_start": round(os.getloadavg()[0], 2)}


def benchmark(spark, bootstrap: str, dsn: str, *, paths: list[str], rate: int, seconds: float, backlog: int,
              partitions: int, trigger: str, dwell_ms: int, batch_rows: int, warmup: float,
              broker_pid: int | None, quick: bool, log: Log = _log) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "kafka_workload", "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), "quick": quick,
        "machine": machine_info(spark, broker_pid is None, "PG_DSN" in os.environ),
        "setup": {"kafka_partitions": partitions, "trigger_realtime": trigger, "microbatch_trigger": "0 seconds",
                  "seconds_per_run": seconds, "backlog_rows": backlog, "sink_flush_rows": batch_rows,
                  "sink_flush_ms": dwell_ms, "record_bytes": len(f"k4095\t{10**6},{PAD}"),
                  "latency": "Postgres commit time minus the record's Kafka timestamp (producer send time)",
                  "sustained_rate": "offered / (1 + latency growth), the latency growth being the least-squares "
                                    "slope of latency against produce time (a path moving C rows/s of R offered "
                                    "grows latency by R/C - 1 seconds per second)",
                  "sustained_when": f"every row landed and sustained >= {SUSTAINED_SHARE:.0%} of offered"},
        "seed": SEED, "target_rate": rate, "percentile_method": "nearest-rank", "paths": [],
    }
    bench = Bench(spark, bootstrap, dsn, partitions=partitions, trigger=trigger, dwell_ms=dwell_ms,
                  batch_rows=batch_rows, broker_pid=broker_pid, log=log)
    for path in paths:
        results["paths"].append(run_path(bench, path, rate=rate, seconds=seconds, backlog=backlog, warmup=warmup,
                                         log=log))
    results["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return results


# ------------------------------------------------------------------ report


def table(results: dict[str, Any]) -> str:
    from pack_lab.text_table import aligned

    rows = [["path", "rate/s", "sustained/s", "kept up", "rows", "p50 ms", "p95 ms", "p99 ms", "CPU s/1k rows",
             "machine busy", "load 1m"]]
    for entry in results["paths"]:
        for run in entry["runs"]:
            if "visible" not in run:
                rows.append([entry["path"], str(run["rate"]), "-", "-", "-", run.get("error", "-")[:40], "", "", "",
                             "", ""])
                continue
            vis = run["visible"]
            busy = run["profile"].get("machine_busy_share")
            rows.append([entry["path"], f"{run['rate']}", f"{run['sustained_rows_per_s']:.0f}",
                         "yes" if run["sustained"] else "no", f"{run['rows_landed']}/{run['rows_sent']}",
                         f"{vis.get('p50', 0):.0f}", f"{vis.get('p95', 0):.0f}", f"{vis.get('p99', 0):.0f}",
                         f"{run['cpu_s_per_1000_rows']:.2f}", "-" if busy is None else f"{busy:.0%}",
                         f"{run['load_average_1m']['end']:g}"])
    return aligned(rows)


PATH_LABELS = {"rtm-jvm": "RTM + JVM sink", "rtm-fast-foreach": "RTM + fast Python foreach",
               "microbatch": "micro-batch + Python foreach"}


def markdown_table(results: dict[str, Any]) -> str:
    """The runs as a Markdown table and the comparison with the seed (a generated block in the references:
    ``<!-- generated:kafka-workload -->``)."""
    lines = ["| path | capacity (rows/s) | offered/s | sustained/s | kept up | rows | p50 ms | p95 ms | p99 ms "
             "| CPU s per 1,000 rows | Spark's share |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for entry in results["paths"]:
        cap = entry.get("capacity", {}).get("rows_per_s")
        for run in entry["runs"]:
            label = PATH_LABELS.get(entry["path"], entry["path"])
            if "visible" not in run:
                lines.append(f"| {label} | {cap or '-'} | {run['rate']:,} | - | - | - | - | - | - | - | "
                             f"{run.get('error', '-')[:60]} |")
                continue
            vis, spark_share = run["visible"], run.get("spark_cpu_s_per_1000_rows")
            share = f"{spark_share / run['cpu_s_per_1000_rows']:.0%}" if spark_share and run["cpu_s_per_1000_rows"] \
                else "-"
            lines.append(f"| {label} | {'-' if cap is None else f'{cap:,.0f}'} | {run['offered_rows_per_s']:,.0f} | "
                         f"{run['sustained_rows_per_s']:,.0f} | {'yes' if run['sustained'] else 'no'} | "
                         f"{run['rows_landed']:,}/{run['rows_sent']:,} | {vis['p50']:,.0f} | {vis['p95']:,.0f} | "
                         f"{vis['p99']:,.0f} | {run['cpu_s_per_1000_rows']:.2f} | {share} |")
    m, setup, seed = results["machine"], results["setup"], results["seed"]
    best = {e["path"]: e.get("highest_sustained_rate") for e in results["paths"]}
    kept = ", ".join(f"{PATH_LABELS.get(p, p)} {'none' if r is None else f'{r:,} rows/s'}" for p, r in best.items())
    lines += ["", f"From `benchmarks/results/kafka_workload.json` ({results['date']}{', quick run' if results['quick'] else ''}): "
              f"Kafka {m['kafka']} ({setup['kafka_partitions']} partition(s)), Spark {m['spark_master']} "
              f"(pyspark {m['pyspark']}{', connector ' + m['spark_kafka_connector'] if m.get('spark_kafka_connector') else ''}), Postgres ({m['postgres']}) and the producer on the same {m['cores']} cores; "
              f"1-minute load average {m['load_average_1m_at_start']:g} at the start and "
              f"{m.get('load_average_1m_at_end', 0):g} at the end; real-time trigger {setup['trigger_realtime']}, "
              f"{setup['seconds_per_run']:g} s of input per paced run, sink flush at {setup['sink_flush_rows']} rows or "
              f"{setup['sink_flush_ms']} ms. Latency: {setup['latency']}. Highest paced rate kept up: {kept}. "
              f"The seed (Databricks, {seed['compute']}; {seed['sink']}; {seed['kafka_partitions']} partitions): "
              f"{seed['rate']:,} rows/s, p50 {seed['p50_ms']} ms, p95 {seed['p95_ms']} ms."]
    bottlenecks = [f"{PATH_LABELS.get(e['path'], e['path'])} at {r['rate']:,} rows/s: {r['bottleneck']}"
                   for e in results["paths"] for r in e["runs"] if r.get("bottleneck") and not r.get("sustained")]
    if bottlenecks:
        lines += ["", "Where a run fell behind, its profile says why:", ""] + [f"- {b}" for b in bottlenecks]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1,000 rows/s for 5 s per path, a 5,000-row backlog, 1 partition (smoke run)")
    parser.add_argument("--rate", type=int, default=None, help=f"target rows/s (default {TARGET_RATE})")
    parser.add_argument("--seconds", type=float, default=None, help="seconds of input per paced run (default 40)")
    parser.add_argument("--backlog", type=int, default=None, help="rows of the capacity backlog (default 150000)")
    parser.add_argument("--partitions", type=int, default=None, help="Kafka partitions (default 2, one per core)")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    parser.add_argument("--trigger", default="5 minutes", help="real-time trigger (default 5 minutes, the seed's)")
    parser.add_argument("--dwell-ms", type=int, default=5, help="sink flush interval (default 5 ms)")
    parser.add_argument("--batch-rows", type=int, default=1000, help="sink flush size (default 1000)")
    parser.add_argument("--warmup", type=float, default=120.0, help="max seconds for the warm-up row")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--from-json", type=Path, help="run nothing: print the table and redraw the chart")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        return report(json.loads(args.from_json.read_text(encoding="utf-8")), args.from_json)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not paths or any(p not in PATHS for p in paths):
        parser.error(f"--paths must be a subset of {','.join(PATHS)}")
    rate = args.rate or (1_000 if args.quick else TARGET_RATE)
    seconds = args.seconds or (5.0 if args.quick else 40.0)
    backlog = args.backlog or (5_000 if args.quick else 150_000)
    partitions = args.partitions or (1 if args.quick else 2)
    for name, value in (("--rate", rate), ("--backlog", backlog), ("--partitions", partitions)):
        if value < 1:
            parser.error(f"{name} must be at least 1")
    try:
        results = _run(args, paths, rate, seconds, backlog, partitions)
    except Exception as exc:  # one line, no traceback: what failed and why
        print(f"kafka_workload: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return report(results, args.output)


def _run(args, paths: list[str], rate: int, seconds: float, backlog: int, partitions: int) -> dict[str, Any]:
    from pack_lab.interrupts import interrupts_raise
    from pack_lab.kafka_broker import BOOTSTRAP_ENV, KafkaBroker
    from pack_lab.kafka_topics import kafka_jars
    from pack_lab.local_postgres import postgres_dsn
    from pack_lab.sink_clock import SERVER_SETTINGS

    jars = kafka_jars()
    if "rtm-jvm" in paths:
        from rtm_lakebase.jvm.sink import jvm_sink_jars

        jars += jvm_sink_jars()
    if "rtm-fast-foreach" in paths:
        from rtm_lakebase.foreach import foreach_jars

        jars += foreach_jars()
    with interrupts_raise(), contextlib.ExitStack() as stack:  # Ctrl-C / SIGTERM: queries, servers, folders go
        _log("starting Postgres and Kafka")
        dsn = stack.enter_context(postgres_dsn(settings=SERVER_SETTINGS))
        external = os.environ.get(BOOTSTRAP_ENV, "").strip()
        broker = None if external else stack.enter_context(KafkaBroker())
        bootstrap = external or broker.bootstrap
        from pack_lab.rtm_lab import build_session

        spark = build_session(cores=max(CORES, partitions), shuffle_partitions=1, app_name="kafka-workload",
                              jars=jars)
        spark.sparkContext.setLogLevel("OFF")
        stack.callback(spark.stop)
        _log(f"kafka workload: paths {paths}, {rate} rows/s for {seconds:g} s each, {partitions} partition(s), "
             f"real-time trigger {args.trigger}")
        return benchmark(spark, bootstrap, dsn, paths=paths, rate=rate, seconds=seconds, backlog=backlog,
                         partitions=partitions, trigger=args.trigger, dwell_ms=args.dwell_ms,
                         batch_rows=args.batch_rows, warmup=args.warmup,
                         broker_pid=broker.pid if broker else None, quick=args.quick)


def report(results: dict[str, Any], output: Path) -> int:
    from benchmarks.charts import render_kafka_workload

    print(table(results))
    for entry in results["paths"]:
        cap = entry.get("capacity", {})
        print(f"{entry['path']}: capacity {cap.get('rows_per_s', '-')} rows/s; highest sustained paced rate "
              f"{entry.get('highest_sustained_rate') or 'none'}")
        for run in entry["runs"]:
            if "bottleneck" in run:
                print(f"  @ {run['rate']}/s bottleneck: {run['bottleneck']}")
    print(f"wrote {render_kafka_workload(results, output.with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
