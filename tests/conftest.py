"""Shared fixtures: one SparkSession and one Postgres for the whole test session.

- ``spark``: the lab's local RTM session (``local[4]``, 2 shuffle partitions).
  Queries started by a test must be stopped by it; ``stop_all_queries`` runs
  after every test that used Spark as a safety net.
- ``pg_dsn``: ``$PG_DSN`` when set, otherwise a throwaway local server.
- ``pg_server``: a private embedded server a test may stop and restart
  (fault tests); never the shared one.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Spark's Python workers import the pack's lab (pack_lab/, not installed) from the repository root.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)

#: Task slots of the shared session. RTM needs source + shuffle partitions slots
#: for a stateful query, so 4 covers a 2-partition source with 2 shuffle partitions.
SPARK_CORES = 4
SHUFFLE_PARTITIONS = 2


@pytest.fixture(scope="session")
def spark():
    from pack_lab.rtm_lab import build_session
    from rtm_lakebase.foreach import FastForeachUnavailable, foreach_jars
    from rtm_lakebase.jvm.sink import JvmSinkUnavailable, jvm_sink_jars

    jars: list[str] = []
    try:  # the JVM sink's jars, when built (scripts/setup.sh builds them where javac exists)
        jars += jvm_sink_jars()
    except JvmSinkUnavailable:
        pass
    try:  # the fast foreach writer's jar, built by the same script
        jars += foreach_jars()
    except FastForeachUnavailable:
        pass
    try:  # the lab's rate source (pack_lab/jvm), built by the same script
        from pack_lab.rate_source import RateSourceUnavailable, rate_source_jars

        jars += rate_source_jars()
    except RateSourceUnavailable:
        pass
    try:  # Spark's Kafka connector and the lab's Kafka client (scripts/install_jars.sh)
        from pack_lab.kafka_topics import kafka_jars
        from pack_lab.maven_jars import JarsUnavailable

        jars += kafka_jars()
    except JarsUnavailable:
        pass
    session = build_session(cores=SPARK_CORES, shuffle_partitions=SHUFFLE_PARTITIONS,
                            app_name="rtm-pack-tests", jars=jars or None)
    # recentProgress keeps 100 batches by default; a quiet machine runs more than that in one test,
    # and helpers that sum it (input rows, batch times) would lose the early ones.
    session.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(autouse=True)
def _stop_leftover_queries(request):
    yield
    if "spark" in request.fixturenames:
        session = request.getfixturevalue("spark")
        for query in session.streams.active:
            query.stop()
        session.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


@pytest.fixture
def checkpoint(tmp_path):
    """A fresh checkpoint folder for one query."""
    path = tmp_path / f"checkpoint-{uuid.uuid4().hex[:8]}"
    return str(path)


@pytest.fixture(scope="session")
def pg_dsn():
    from pack_lab.local_postgres import postgres_dsn

    with postgres_dsn() as dsn:
        yield dsn


@pytest.fixture
def pg_server():
    from pack_lab.local_postgres import EmbeddedPostgres

    with EmbeddedPostgres(log=lambda _msg: None) as server:
        yield server


@pytest.fixture(scope="session")
def kafka_broker():
    """The session's Kafka broker: ``None`` when ``KAFKA_BOOTSTRAP`` points at one of your own,
    else a throwaway local one (``pack_lab/kafka_broker.py``) that fault tests may restart.
    Skips when Java or the broker's jars are missing (``scripts/install_jars.sh`` fetches them)."""
    from pack_lab.kafka_broker import BOOTSTRAP_ENV, KafkaBroker, KafkaUnavailable

    if os.environ.get(BOOTSTRAP_ENV, "").strip():
        yield None
        return
    try:
        broker = KafkaBroker(log=lambda _msg: None)
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    with broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker):
    """Bootstrap address of the session's broker (``$KAFKA_BOOTSTRAP`` or the local one)."""
    from pack_lab.kafka_broker import BOOTSTRAP_ENV

    return kafka_broker.bootstrap if kafka_broker is not None else os.environ[BOOTSTRAP_ENV].strip()


@pytest.fixture
def pg_conn(pg_dsn):
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def table_name():
    """A unique table name per test, so tests can share one database."""
    return f"t_{uuid.uuid4().hex[:10]}"
