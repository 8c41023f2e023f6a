"""End-to-end demo: one workload, four ways into Postgres, verified and compared.

Run it with ``bash scripts/demo.sh`` (or ``python -m pack_lab.demo --help``).
A simulated upstream sends events (with a share of retried duplicates) at a
set rate; a query deduplicates them and upserts them into a fresh table:

1. ``rtm-jvm`` — real-time mode (``trigger(realTime=...)``) writing through the
   JVM sink (``rtm_lakebase.jvm.sink``);
2. ``rtm-fast-foreach`` — real-time mode, the same Python sink through
   ``rtm_lakebase.foreach.start_foreach_query`` (rows reach it as they come);
3. ``rtm-python`` — real-time mode writing through the Python ``foreach`` sink;
4. ``microbatch`` — micro-batch with a 0 s trigger and the Python sink.

After each path the table must hold exactly one row per distinct event sent
(0 missing, 0 duplicated). The demo prints live progress, then a side-by-side
table of sink-visible latency (sent → visible in Postgres) and engine latency
(sent → the row's per-row JVM clock inside the query), writes a JSON report
and a latency chart, and names both on its last lines. Without a built JVM
sink (or fast foreach jar) it runs the other paths and says why.

Every flag is checked before Spark or Postgres start; a bad ``PG_DSN`` stops
it in one line. Nothing is left behind on any exit path, Ctrl-C and SIGTERM
included: tables are dropped unless ``--keep-table``, checkpoints removed.
Exit codes: 0 every path verified, 1 a path failed or its table does not
match, 2 bad arguments or environment, 128+N stopped by signal N.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pack_lab.demo_options import PATH_TITLES, DemoOptions, parse_args
from pack_lab.demo_report import (  # noqa: F401
    CHART_NAME,
    REPORT_NAME,
    PathResult,
    format_notes,
    format_table,
    overall_ok,
    write_chart,
    write_report,
)
from pack_lab.interrupts import Interrupted, interrupts_raise, reclaim, shielded

#: Exit codes: 0 all rows verified, 1 the run failed or the table does not match, 2 bad arguments/environment.
EXIT_OK, EXIT_MISMATCH, EXIT_ENV = 0, 1, 2

CHECKPOINT_PREFIX = "rtm-demo-checkpoint-"
TABLE_PREFIX = "rtm_demo_"

Log = Callable[[str], None]


class DemoEnvironmentError(RuntimeError):
    """The environment cannot run the demo (Postgres, Spark, permissions); one line, no secret."""


def demo_table_ddl(table: str):
    """The demo's target table: one row per event, with Postgres' own clock at insert."""
    from psycopg import sql

    from pack_lab.sink_clock import WRITTEN_MS_COLUMN

    return sql.SQL("""
        CREATE TABLE {table} (
            event_id   text PRIMARY KEY,
            device_id  text NOT NULL,
            event_ms   bigint NOT NULL,
            sent_ms    bigint NOT NULL,
            value      double precision,
            payload    text,
            seq        bigint NOT NULL,
            ingest_ms  bigint,
            """ + WRITTEN_MS_COLUMN + """
        ) WITH (fillfactor = 90)
    """).format(table=sql.Identifier(table))


def build_pipeline(events, pipeline: str):
    """The streaming DataFrame the demo writes: per-row ingest time, dedup if asked."""
    from examples.real_time_pipelines import dedup_events, with_ingest_time

    stamped = with_ingest_time(events).drop("event_time")
    return dedup_events(stamped) if pipeline == "dedup" else stamped


def make_writer(dsn: str, table: str, options: DemoOptions):
    """The idempotent upsert writer: key ``event_id``, a replayed row (same ``seq``) is skipped."""
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    settings = SinkSettings(
        table=table,
        mode="upsert",
        key_columns=("event_id",),
        version_column="seq",          # a replay carries the same seq: never rewrites a row
        max_batch_rows=options.max_batch_rows,
        max_dwell_ms=options.max_dwell_ms,
    )
    return PostgresForeachWriter(dsn, settings)


# ------------------------------------------------------------------ the JVM sink


def jvm_sink_jars() -> tuple[list[str], str | None]:
    """``(jars, None)`` when the JVM sink is built and usable, else ``([], why not)``."""
    try:
        from rtm_lakebase.jvm import sink as jvm_sink
    except ImportError as exc:
        return [], f"the JVM sink module is not available ({exc})"
    try:
        jars = list(jvm_sink.jvm_sink_jars())
    except Exception as exc:  # not built (no javac), driver missing, ...
        return [], _one_line(exc)
    missing = [jar for jar in jars if not Path(jar).is_file()]
    if missing:
        return [], f"the JVM sink jar is missing: {missing[0]} (run bash scripts/setup.sh)"
    return jars, None


def fast_foreach_jars() -> tuple[list[str], str | None]:
    """``(jars, None)`` when the fast foreach writer is built, else ``([], why not)``."""
    from rtm_lakebase.foreach import foreach_jars

    try:
        return list(foreach_jars()), None
    except Exception as exc:  # not built (no javac), stale
        return [], _one_line(exc)


def jvm_dsn_problem(dsn: str) -> str | None:
    """Why the JVM sink cannot use ``dsn`` (e.g. a Unix-socket host), or ``None``; never the secret."""
    from rtm_lakebase.jvm.sink import jdbc_url

    try:
        jdbc_url(dsn)
    except Exception as exc:  # ValueError for what JDBC cannot do; a settings error for a bad DSN
        return f"the JVM sink cannot use PG_DSN: {_one_line(exc)}"
    return None


def session_has_jars(spark, jars: list[str]) -> bool:
    """True when the running session was started with every one of ``jars`` on ``spark.jars``."""
    loaded = spark.sparkContext.getConf().get("spark.jars", "") or ""
    names = {Path(item).name for item in loaded.split(",") if item}
    return all(Path(jar).name in names for jar in jars)


def start_query(path: str, events, dsn: str, table: str, checkpoint: str, options: DemoOptions):
    """Start ``path``'s query on ``events`` into ``table``; return the ``StreamingQuery``."""
    name = f"rtm_demo_{path.replace('-', '_')}"
    if path == "rtm-jvm":
        from rtm_lakebase.jvm.sink import start_jvm_sink_query

        return start_jvm_sink_query(
            events, dsn=dsn, table=table, key_columns=("event_id",), mode="upsert",
            version_column="seq", max_batch_rows=options.max_batch_rows,
            max_dwell_ms=options.max_dwell_ms, checkpoint_location=checkpoint,
            trigger={"realTime": options.trigger}, query_name=name)
    trigger = ({"realTime": options.trigger} if path in ("rtm-python", "rtm-fast-foreach")
               else {"processingTime": "0 seconds"})
    if path == "rtm-fast-foreach":
        from rtm_lakebase.foreach import start_foreach_query

        return start_foreach_query(events, make_writer(dsn, table, options), checkpoint_location=checkpoint,
                                   trigger=trigger, query_name=name)
    return (events.writeStream
            .queryName(name)
            .foreach(make_writer(dsn, table, options))
            .outputMode("update")
            .trigger(**trigger)
            .option("checkpointLocation", checkpoint)
            .start())


# ------------------------------------------------------------------ one path


def wait_until_processing(query, real_time: bool, timeout_s: float = 60.0) -> None:
    """Block until the query is running (RTM: its long batch), so start-up is not counted as latency."""
    ready = {"Processing new data"} if real_time else {
        "Processing new data", "Waiting for data to arrive", "Waiting for next trigger"}
    deadline = time.monotonic() + timeout_s
    while query.status.get("message") not in ready:
        if not query.isActive:
            raise RuntimeError(f"the streaming query stopped while starting: {_one_line(query.exception())}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the streaming query did not start within {timeout_s:.0f}s")
        time.sleep(0.1)
    time.sleep(1.0)  # let the long batch's tasks get scheduled


#: Warm-up rows (one per source partition, sent before the workload) carry this id prefix;
#: every count, check and figure leaves them out.
WARMUP_PREFIX = "warmup-"
NOT_WARMUP = "event_id NOT LIKE 'warmup-%'"


def warm_up(source, conn, table: str, partitions: int, timeout_s: float = 5.0) -> None:
    """Send one row per partition and wait (up to ``timeout_s``) until they are in the table.

    The first rows of a query pay for connections, class loading and task start-up;
    the workload's figures should not. Under real-time mode a Python ``foreach`` sink
    may hold them until the long batch ends: the wait is bounded and the demo goes on.
    """
    from psycopg import sql

    from pack_lab.latency_probe import now_ms

    for partition in range(partitions):
        source.add([{"event_id": f"{WARMUP_PREFIX}{partition}", "device_id": "warmup",
                     "event_ms": now_ms(), "sent_ms": now_ms(), "value": 0.0, "payload": "",
                     "seq": 0}], partition=partition)
    deadline = time.monotonic() + timeout_s
    query = sql.SQL("SELECT count(*) FROM {} WHERE NOT (" + NOT_WARMUP + ")").format(sql.Identifier(table))
    while time.monotonic() < deadline and conn.execute(query).fetchone()[0] < partitions:
        time.sleep(0.1)


def count_rows(conn, table: str) -> int:
    from psycopg import sql

    return conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE " + NOT_WARMUP).format(
        sql.Identifier(table))).fetchone()[0]


def stored_ids(conn, table: str) -> set[str]:
    from psycopg import sql

    rows = conn.execute(sql.SQL("SELECT event_id FROM {} WHERE " + NOT_WARMUP).format(
        sql.Identifier(table))).fetchall()
    return {row[0] for row in rows}


def duplicated_rows(conn, table: str) -> int:
    """Rows beyond one per ``event_id`` (the primary key keeps it 0; checked, not assumed)."""
    from psycopg import sql

    query = sql.SQL("SELECT count(*) - count(DISTINCT event_id) FROM {} WHERE " + NOT_WARMUP).format(
        sql.Identifier(table))
    return int(conn.execute(query).fetchone()[0])


def latency_samples(conn, table: str) -> tuple[list[int], list[int], str]:
    """Per-row sink-visible (visible − sent) and engine (ingest − sent) latencies in ms, and the clock used."""
    from psycopg import sql

    from pack_lab.sink_clock import visible_clock

    clock, clock_name = visible_clock(conn)
    query = sql.SQL("SELECT " + clock + " - sent_ms, ingest_ms - sent_ms FROM {} WHERE "
                    + NOT_WARMUP).format(sql.Identifier(table))
    rows = conn.execute(query).fetchall()
    visible = [int(r[0]) for r in rows if r[0] is not None]
    engine = [int(r[1]) for r in rows if r[1] is not None]
    return visible, engine, clock_name


def latency_summary(values: list[int]) -> dict[str, float]:
    from pack_lab.latency_probe import summarize

    summary = summarize(values)
    return {k: summary[k] for k in ("count", "p50", "p95", "p99", "max") if k in summary}


def _drop_table(dsn: str, table: str, log: Log) -> None:
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    except Exception as exc:
        log(f"[demo] could not drop table {table}: {type(exc).__name__}; drop it by hand")


def make_source(spark, options: DemoOptions, kafka_bootstrap: str | None):
    """The path's upstream: a fresh Kafka topic (``--source kafka``) or the in-memory source."""
    if options.source == "kafka":
        from pack_lab.kafka_events import KafkaEventSource

        if not kafka_bootstrap:
            raise DemoEnvironmentError("--source kafka needs a broker (KAFKA_BOOTSTRAP or the lab's own)")
        return KafkaEventSource(spark, kafka_bootstrap, options.partitions)
    from pack_lab.rtm_lab import RealTimeMemorySource
    from pack_lab.upstream_simulator import EVENT_SCHEMA_DDL

    return RealTimeMemorySource(spark, EVENT_SCHEMA_DDL, num_partitions=options.partitions)


def run_path(spark, options: DemoOptions, dsn: str, path: str, log: Log = print,
             kafka_bootstrap: str | None = None) -> PathResult:
    """Run the workload through ``path`` into a fresh table; verify it; drop the table unless kept."""
    import psycopg

    from pack_lab.upstream_simulator import UpstreamFeeder, UpstreamSpec

    result = PathResult(path=path, title=PATH_TITLES[path])
    tag = f"[demo {path}]"
    table = f"{TABLE_PREFIX}{int(time.time() * 1000)}_{path.replace('-', '_')}"
    cleanup = contextlib.ExitStack()
    try:
        # Registered before the table exists, so an interrupt between the two cannot leak it.
        if options.keep_table:
            cleanup.callback(log, f"{tag} kept table {table}")
        else:
            cleanup.callback(_drop_table, dsn, table, log)
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as ddl:
                ddl.execute(demo_table_ddl(table))
        except psycopg.Error as exc:
            raise DemoEnvironmentError(
                f"cannot create the demo table in PG_DSN's database: {type(exc).__name__}"
                f"{' (SQLSTATE ' + exc.sqlstate + ')' if getattr(exc, 'sqlstate', None) else ''}; "
                "the user needs CREATE on the current schema") from None
        log(f"{tag} {result.title}: table {table}")
        checkpoint = tempfile.mkdtemp(prefix=CHECKPOINT_PREFIX)
        cleanup.callback(shutil.rmtree, checkpoint, True)

        conn = cleanup.enter_context(psycopg.connect(dsn, autocommit=True, connect_timeout=10))
        source = make_source(spark, options, kafka_bootstrap)
        if options.source == "kafka":
            log(f"{tag} source: Kafka topic {source.topic} ({options.partitions} partitions) on "
                f"{kafka_bootstrap}; latency from the record's produce timestamp to the Postgres commit")
        events = build_pipeline(source.dataframe(), options.pipeline)
        query = start_query(path, events, dsn, table, checkpoint, options)
        cleanup.callback(_stop_query, query)
        spec = UpstreamSpec(rows_per_second=options.rows_per_second, total_rows=options.rows,
                            num_keys=options.keys, duplicate_pct=options.duplicate_pct,
                            num_partitions=options.partitions, seed=options.seed)
        feeder = UpstreamFeeder(source, spec, keep_rows=True)
        cleanup.callback(_stop_feeder, feeder)
        wait_until_processing(query, real_time=path != "microbatch")
        warm_up(source, conn, table, options.partitions)
        started = time.monotonic()
        feeder.start()
        expected_total = spec.row_limit or 0
        next_log = 0.0
        while True:
            elapsed = time.monotonic() - started
            stats = feeder.stats()
            in_table = count_rows(conn, table)
            if elapsed >= next_log:
                log(f"{tag} {elapsed:5.1f}s sent={stats.rows_sent}/{expected_total} "
                    f"dups={stats.duplicates_sent} in_table={in_table}")
                next_log = elapsed + 1.0
            if not query.isActive:
                raise RuntimeError(f"the streaming query stopped: {_one_line(query.exception())}")
            if feeder.error is not None:
                raise RuntimeError(f"the upstream simulator failed: {feeder.error!r}")
            if stats.done and in_table >= stats.distinct_events:
                break
            if elapsed > options.timeout_s:
                log(f"{tag} timed out after {options.timeout_s:.0f}s with {in_table} of "
                    f"{stats.distinct_events} rows in the table")
                break
            time.sleep(0.2)
        result.seconds = time.monotonic() - started
        _stop_feeder(feeder)
        _stop_query(query)
        stats = feeder.stats()
        sent_ids = {row["event_id"] for row in feeder.sent_rows}
        landed = stored_ids(conn, table)
        visible, engine, clock = latency_samples(conn, table)
        result.rows_sent, result.duplicates_sent = stats.rows_sent, stats.duplicates_sent
        result.distinct_sent, result.rows_in_table = len(sent_ids), count_rows(conn, table)
        result.missing, result.unexpected = len(sent_ids - landed), len(landed - sent_ids)
        result.duplicated = duplicated_rows(conn, table)
        result.latency, result.engine, result.clock = latency_summary(visible), latency_summary(engine), clock
    finally:
        with shielded(log):  # a second Ctrl-C waits until the tables and folders are gone
            cleanup.close()
    log(f"{tag} {'verified' if result.ok else 'MISMATCH'}: {result.rows_in_table} rows for "
        f"{result.distinct_sent} distinct events, {result.missing} missing, "
        f"{result.duplicated} duplicated")
    return result


def _stop_query(query) -> None:
    with contextlib.suppress(Exception):
        if query.isActive:
            query.stop()


def _stop_feeder(feeder) -> None:
    feeder.stop()
    feeder.join(raise_error=False)


def _one_line(value: object) -> str:
    text = str(value).strip() or type(value).__name__
    return text.splitlines()[0][:300]


# ------------------------------------------------------------------ the whole run


#: The session start_session() started in this process (stop_spark() stops it).
_started: list = []


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def start_session(options: DemoOptions, jars: list[str], log: Log = print, cluster_conf=None):
    """The session sized for the query (and carrying the JVM sink jar when there is one).

    ``cluster_conf``: settings of a standalone cluster (:meth:`StandaloneCluster.session_conf`)
    to run the executors on instead of ``local[N]``.
    """
    from pack_lab.rtm_lab import build_session, local_cores
    from rtm_lakebase.calc.sizing import check_local, stateful_query

    shape = stateful_query(source_tasks=options.partitions,
                           shuffle_partitions=options.shuffle_partitions or 1,
                           exchanges=1 if options.pipeline == "dedup" else 0)
    log(f"[demo] the query needs {shape.required_slots} task slots ({options.partitions} source "
        f"+ {sum(shape.shuffle_stages)} shuffle partitions); starting Spark")
    from pyspark.sql import SparkSession

    already_running = SparkSession.getActiveSession() is not None
    jvm_log = None
    if not already_running:  # Spark's log and Python-worker noise go to a throwaway file, not the terminal
        fd, jvm_log = tempfile.mkstemp(prefix="rtm-demo-jvm-", suffix=".log")
        os.close(fd)
        atexit.register(_remove_quietly, jvm_log)
    spark = build_session(cores=shape.required_slots, shuffle_partitions=options.shuffle_partitions or 1,
                          app_name="rtm-demo", jars=jars or None, jvm_log=jvm_log, extra_conf=cluster_conf)
    reclaim()  # PySpark replaced the SIGINT handler; Ctrl-C must clean up like SIGTERM does
    if not already_running:
        _started.append(spark)
    # Stopping a query aborts its tasks, which Spark logs as errors with stack traces; the demo
    # reports failures itself (query.exception()), so keep the terminal to its own lines.
    if not already_running:
        spark.sparkContext.setLogLevel("OFF")
    if cluster_conf:  # the cluster was sized for the query when it started
        return spark
    # getOrCreate may hand back a session that was already running: check its real slots.
    local = check_local(shape, local_cores(spark))
    if not local.fits:
        raise RuntimeError(local.message)
    return spark


def kafka_source_jars(options: DemoOptions) -> list[str]:
    """Spark's Kafka connector and the lab's Kafka client, when the demo reads Kafka."""
    if options.source != "kafka":
        return []
    from pack_lab.kafka_topics import kafka_jars
    from pack_lab.maven_jars import JarsUnavailable

    try:
        return kafka_jars()
    except JarsUnavailable as exc:
        raise DemoEnvironmentError(f"--source kafka: {exc}") from None


def run_demo(options: DemoOptions, dsn: str, log: Log = print, spark=None,
             cluster_conf=None, kafka_bootstrap: str | None = None) -> list[PathResult]:
    """Run every selected path against ``dsn``, one after the other; return their results.

    With ``options.source == "kafka"`` each path produces into its own topic on
    ``kafka_bootstrap`` (``$KAFKA_BOOTSTRAP`` or a throwaway local broker when ``None``).
    """
    if options.source == "kafka" and kafka_bootstrap is None:
        from pack_lab.kafka_broker import KafkaUnavailable
        from pack_lab.kafka_broker import kafka_bootstrap as start_broker

        kafka_source_jars(options)  # a missing jar is an error before a broker starts
        log("[demo] starting a Kafka broker (set KAFKA_BOOTSTRAP to use your own)")
        try:
            with start_broker() as bootstrap:
                return run_demo(options, dsn, log, spark, cluster_conf, kafka_bootstrap=bootstrap)
        except KafkaUnavailable as exc:
            raise DemoEnvironmentError(f"--source kafka: {exc}") from None
    source_jars = kafka_source_jars(options)
    jars, why_not = jvm_sink_jars() if "rtm-jvm" in options.paths else ([], None)
    fast_jars, fast_why_not = fast_foreach_jars() if "rtm-fast-foreach" in options.paths else ([], None)
    if spark is None:
        spark = start_session(options, jars + fast_jars + source_jars, log, cluster_conf=cluster_conf)
    else:
        from pack_lab.rtm_lab import local_cores
        from rtm_lakebase.calc.sizing import check_local, stateful_query

        shape = stateful_query(source_tasks=options.partitions,
                               shuffle_partitions=options.shuffle_partitions or 1,
                               exchanges=1 if options.pipeline == "dedup" else 0)
        local = check_local(shape, local_cores(spark))
        if not local.fits:
            raise RuntimeError(local.message)
    if jars and not session_has_jars(spark, jars):
        jars, why_not = [], "the running SparkSession was started without the JVM sink jar"
    if source_jars and not session_has_jars(spark, source_jars):
        raise DemoEnvironmentError("--source kafka: the running SparkSession was started without "
                                   "Spark's Kafka connector; use --source memory or start it with "
                                   "pack_lab.kafka_topics.kafka_jars()")
    if fast_jars and not session_has_jars(spark, fast_jars):
        fast_jars, fast_why_not = [], "the running SparkSession was started without the fast foreach jar"
    if jars:
        why_not = jvm_dsn_problem(dsn)
        jars = [] if why_not else jars
    results = []
    for path in options.paths:
        skip = (why_not if path == "rtm-jvm" and not jars
                else fast_why_not if path == "rtm-fast-foreach" and not fast_jars else None)
        if skip:
            log(f"[demo {path}] skipped: {skip}")
            results.append(PathResult(path=path, title=PATH_TITLES[path], skipped=skip))
            continue
        try:
            results.append(run_path(spark, options, dsn, path, log, kafka_bootstrap))
        except DemoEnvironmentError:
            raise
        except Exception as exc:  # the query died, the simulator failed: report, go on
            log(f"[demo {path}] failed: {_one_line(exc)}")
            results.append(PathResult(path=path, title=PATH_TITLES[path], error=_one_line(exc)))
    return results


def stop_spark() -> None:
    """Stop the session :func:`start_session` started, if any (Spark removes its temporary folders).

    A session the caller passed in (e.g. the test suite's) is never stopped here.
    """
    session = _started.pop() if _started else None
    if session is not None:
        with contextlib.suppress(Exception):
            session.stop()


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)  # exits 2 with one line on a bad flag, before anything starts
    # A signal that lands inside a py4j call breaks that call's socket;
    # py4j (and PySpark through the root logger) then logs the broken connection with a stack
    # trace. The demo reports what happened in one line itself.
    loggers = [logging.getLogger(name) for name in ("py4j", "")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        return _run(options)
    finally:  # in-process callers (tests) get their logging back
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _run(options: DemoOptions) -> int:
    from pack_lab.local_postgres import PostgresUnavailable, postgres_dsn
    from pack_lab.pg_preflight import PostgresCheckFailed, check_postgres
    from pack_lab.rtm_lab import RealTimeModeUnavailable
    from pack_lab.sink_clock import SERVER_SETTINGS

    def err(message: str) -> None:
        print(f"[demo] {message}", file=sys.stderr, flush=True)

    try:
        with interrupts_raise():
            stack = contextlib.ExitStack()
            try:
                dsn = stack.enter_context(postgres_dsn(settings=SERVER_SETTINGS))
                stack.callback(stop_spark)
                check_postgres(dsn, can_create=True)
                cluster_conf = None
                if options.master == "standalone":
                    from pack_lab.standalone_cluster import StandaloneCluster
                    from rtm_lakebase.calc import stateful_query

                    slots = stateful_query(source_tasks=options.partitions,
                                           shuffle_partitions=options.shuffle_partitions or 1,
                                           exchanges=1 if options.pipeline == "dedup" else 0).required_slots
                    # Each worker alone holds every task, so the query survives losing one.
                    cluster = stack.enter_context(StandaloneCluster(
                        workers=2, cores_per_worker=slots, log=lambda line: print(f"[demo] {line}", flush=True)))
                    cluster_conf = cluster.session_conf()
                results = run_demo(options, dsn, log=lambda line: print(line, flush=True),
                                   cluster_conf=cluster_conf)
            finally:
                with shielded(err):  # Spark and the throwaway Postgres go, even on a second Ctrl-C
                    stack.close()
    except KeyboardInterrupt as exc:  # Interrupted, or PySpark's own SIGINT handler once Spark runs
        name, code = (str(exc), exc.exit_code) if isinstance(exc, Interrupted) else ("SIGINT", 130)
        err(f"stopped by {name}; cleaned up (tables dropped unless --keep-table, checkpoints removed)")
        return code
    except (PostgresCheckFailed, PostgresUnavailable, RealTimeModeUnavailable,
            DemoEnvironmentError) as exc:
        err(f"cannot run: {_one_line(exc)}")
        return EXIT_ENV
    except RuntimeError as exc:  # too few slots, Spark failed to start
        err(f"failed: {_one_line(exc)}")
        return EXIT_MISMATCH
    out_dir = Path(options.output_dir)
    print()
    print(format_table(results))
    for note in format_notes(results):
        print(note)
    ok = overall_ok(results)
    print("RESULT: OK — every distinct event landed exactly once on every path that ran" if ok
          else "RESULT: FAILED — see the table above")
    report = write_report(results, options, out_dir)
    chart, why_not = write_chart(report, out_dir)
    print(f"report: {report}")
    print(f"chart:  {chart}" if chart else f"chart:  {why_not}")
    return EXIT_OK if ok else EXIT_MISMATCH


if __name__ == "__main__":
    raise SystemExit(main())
