"""Low-latency Postgres/Lakebase sink in the JVM, driven from Python: the only module a user touches.

PySpark's ``foreach`` hands rows to a Python worker in growing pickled batches,
so under real-time mode a row can wait seconds before ``process()`` sees it.
This module attaches a compiled Java ``ForeachWriter<Row>``
(``rtm_lakebase/jvm/PostgresForeachWriter.java``) to the query through py4j
instead, so rows go from the engine to Postgres without leaving the JVM::

    query = start_jvm_sink_query(
        events, dsn=dsn, table="events", key_columns=("id",), version_column="version",
        checkpoint_location="/tmp/ck/events", trigger={"realTime": "5 minutes"})

The session must have the writer jar and the Postgres JDBC driver on its
classpath from the start (``spark.jars``; :func:`jvm_sink_jars` lists them for a
local session). The knobs have the names of :class:`~rtm_lakebase.sink.SinkSettings`;
:data:`JVM_OPTIONS` maps them to the Java writer's options, which are the native
Lakebase sink's where it has one (``dbtable``, ``upsertkey``, ``batchsize``,
``batchinterval``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from rtm_lakebase.jvm.build import (
    CACHED_DRIVER,
    DRIVER_ENV,
    PG_JDBC_MAVEN,
    PG_JDBC_VERSION,
    SYSTEM_DRIVER,
    BuildError,
    find_driver,
)
from rtm_lakebase.postgres.connection import ConnectionSettings, as_connection_settings, redact
from rtm_lakebase.sink.deprecated_names import take_old_names
from rtm_lakebase.sink.settings import SinkSettings
from rtm_lakebase.sink.statements import split_table_name

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

#: The Java class, compiled from ``rtm_lakebase/jvm/PostgresForeachWriter.java``.
WRITER_CLASS = "rtm_lakebase.jvm.PostgresForeachWriter"
#: Where ``python -m rtm_lakebase.jvm build`` puts the jar (git-ignored); ``RTM_JVM_SINK_JAR`` overrides it.
JVM_DIR = Path(__file__).resolve().parent
SOURCE_FILE = JVM_DIR / "PostgresForeachWriter.java"
#: The failure-outcome table both sinks read; the build stores it in the jar.
OUTCOMES_FILE = JVM_DIR.parent / "sink" / "outcomes.json"
DEFAULT_JAR = JVM_DIR / "build" / "rtm-lakebase-jvm-sink.jar"
JAR_ENV = "RTM_JVM_SINK_JAR"
#: The Postgres JDBC driver's lookup (``$PG_JDBC_JAR``, the set-up's pinned pgjdbc, Debian's copy) and its
#: Maven coordinates for clusters are defined once, in rtm_lakebase.jvm.build.

MODES = ("upsert", "insert_ignore", "append")
#: Seconds a JDBC read may wait for the server before the connection counts as lost (reconnect, retry).
#: Without it a silent network path (no reset) blocks a flush, and the task, forever.
SOCKET_TIMEOUT_S = 60
BUILD_HINT = ("run `python -m rtm_lakebase.jvm build` (needs a JDK with javac and pyspark installed; "
              f"in the pack's repository `bash scripts/build_jvm_sink.sh` does it), or set {JAR_ENV} to a built jar")


class JvmSinkUnavailable(RuntimeError):
    """The JVM sink cannot run here; the message names what is missing and how to get it."""


# --8<-- [start:jvm_sink_jars]
def jvm_sink_jars() -> list[str]:
    """The jars a local session needs on ``spark.jars``: the writer jar and the JDBC driver.

    Raises :class:`JvmSinkUnavailable` naming the missing or stale jar.
    """
    return [str(_writer_jar()), str(_driver_jar())]
# --8<-- [end:jvm_sink_jars]


def _sources_sha() -> str:
    """The hash the build records (rtm_lakebase.jvm.build): the ``.java`` files beside the writer, then the table."""
    from rtm_lakebase.jvm.build import resource_files, sources_sha

    return sources_sha(SOURCE_FILE.parent, resource_files(OUTCOMES_FILE.parent))


def _writer_jar() -> Path:
    override = os.environ.get(JAR_ENV)
    jar = Path(override) if override else DEFAULT_JAR
    if not jar.is_file():
        where = f"${JAR_ENV}={override}" if override else str(jar)
        raise JvmSinkUnavailable(f"the JVM sink jar is not built ({where} not found): {BUILD_HINT}")
    if not override:  # the build records the source's hash next to the jar
        stamp = jar.with_suffix(".sha256")
        current = _sources_sha() if SOURCE_FILE.is_file() else None
        recorded = stamp.read_text().strip() if stamp.is_file() else None
        if current and recorded != current:
            raise JvmSinkUnavailable(f"the JVM sink jar {jar} is older than {SOURCE_FILE.name} (or another .java "
                                     f"file beside it, or {OUTCOMES_FILE.name}): {BUILD_HINT}")
    return jar


def _driver_jar() -> Path:
    try:
        found = find_driver(cached=CACHED_DRIVER, system=SYSTEM_DRIVER)
    except BuildError as exc:
        raise JvmSinkUnavailable(str(exc)) from None
    if found is None:
        raise JvmSinkUnavailable(
            f"the Postgres JDBC driver was not found: run `bash scripts/setup.sh` (fetches pgjdbc {PG_JDBC_VERSION} "
            f"into {CACHED_DRIVER.parent}), set {DRIVER_ENV}=/path/to/postgresql-42.x.jar, or install "
            f"Debian's copy (apt-get install libpostgresql-jdbc-java → {SYSTEM_DRIVER}); on a cluster use "
            f"spark.jars.packages={PG_JDBC_MAVEN}")
    return found


# -- DSN → JDBC -------------------------------------------------------------------
#: libpq parameters with a pgjdbc equivalent (same meaning, pgjdbc's name).
_LIBPQ_TO_JDBC = {"options": "options", "sslrootcert": "sslrootcert", "sslcert": "sslcert",
                  "sslkey": "sslkey"}


def _jdbc_parts(settings: ConnectionSettings,
                socket_timeout_s: int = SOCKET_TIMEOUT_S) -> tuple[str, str | None, str | None]:
    """(URL without credentials, user, password) as libpq would connect, environment fallbacks included."""
    env = os.environ
    if settings.hostaddr or env.get("PGHOSTADDR"):
        raise ValueError("hostaddr has no JDBC equivalent in the JVM sink: put the server's address in host")
    if env.get("PGSERVICE") or "service" in settings.extra:
        raise ValueError("a service file (service=/PGSERVICE) has no JDBC equivalent in the JVM sink: "
                         "give host, port and dbname instead")
    sslmode = settings.effective_sslmode  # the same choice the Python writer makes (PGSSLMODE included)
    hosts = [h.strip() for h in str(settings.host or env.get("PGHOST") or "localhost").split(",")]
    ports = [p.strip() for p in str(settings.port or env.get("PGPORT") or 5432).split(",")]
    if len(ports) == 1:
        ports *= len(hosts)
    if len(ports) != len(hosts):
        raise ValueError(f"{len(ports)} ports for {len(hosts)} hosts: give one port, or one per host")
    places = []
    for host, port in zip(hosts, ports, strict=True):
        host = host or "localhost"
        if host.startswith(("/", "@")):
            raise ValueError("the JVM sink connects over TCP only and a host is a Unix-socket folder: "
                             "use host=127.0.0.1 (or the server's address)")
        try:
            if ipaddress.ip_address(host).version == 6:
                host = f"[{host}]"
        except ValueError:
            pass
        places.append(f"{host}:{int(port)}")
    timeout = settings.connect_timeout or env.get("PGCONNECT_TIMEOUT") or 10
    if isinstance(socket_timeout_s, bool) or not isinstance(socket_timeout_s, int) or socket_timeout_s < 1:
        raise ValueError(f"socket_timeout_s must be a positive number of seconds, got {socket_timeout_s!r}")
    params = {"sslmode": sslmode, "connectTimeout": str(int(timeout)),
              "ApplicationName": settings.application_name, "tcpKeepAlive": "true",
              "socketTimeout": str(socket_timeout_s)}
    for key, value in dict(settings.extra or {}).items():
        if key not in _LIBPQ_TO_JDBC or not isinstance(value, str):
            raise ValueError(f"DSN parameter {key!r} has no equivalent the JVM sink passes to the JDBC "
                             f"driver (supported: {sorted(_LIBPQ_TO_JDBC)})")
        params[_LIBPQ_TO_JDBC[key]] = value
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
    # No database: the driver, like libpq, uses the user's name.
    dbname = settings.dbname or env.get("PGDATABASE") or ""
    url = f"jdbc:postgresql://{','.join(places)}/{quote(dbname, safe='')}?{query}"
    password = settings.password.reveal() if settings.password else env.get("PGPASSWORD")
    user = settings.user or env.get("PGUSER") or _os_user()
    if not password:  # libpq's next source: the password file
        first_host, first_port = places[0].rsplit(":", 1)
        password = pgpass_password(first_host.strip("[]"), first_port, dbname or user, user)
    return url, settings.user or env.get("PGUSER"), password or None


def _os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return ""


def _pgpass_fields(line: str) -> list[str]:
    fields, current, chars = [], [], iter(line)
    for ch in chars:
        if ch == "\\":
            current.append(next(chars, ""))
        elif ch == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(ch)
    fields.append("".join(current))
    return fields


def pgpass_password(host: str, port: str, dbname: str, user: str) -> str | None:
    """The password libpq would take from ``$PGPASSFILE`` (default ``~/.pgpass``) for this target, or ``None``.

    Lines are ``host:port:database:username:password``, ``*`` matches anything, ``\\:``
    and ``\\\\`` escape; the first match wins. As in libpq, a file that group or others
    can read is ignored.
    """
    path = Path(os.environ.get("PGPASSFILE") or Path.home() / ".pgpass")
    try:
        if not path.is_file() or (os.name == "posix" and path.stat().st_mode & 0o077):
            return None
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    wanted = (host, str(port), dbname, user)
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = _pgpass_fields(line)
        if len(fields) < 5:
            continue
        if all(f == "*" or f == w for f, w in zip(fields[:4], wanted, strict=True)):
            return ":".join(fields[4:]) or None
    return None


def jdbc_url(connection: ConnectionSettings | str, socket_timeout_s: int = SOCKET_TIMEOUT_S) -> str:
    """A ``jdbc:postgresql://`` URL for the same server, TLS mode and timeouts as the DSN; no credentials.

    TCP keepalive is on, and a read waits at most ``socket_timeout_s`` seconds.

    Unset parts come from ``PGHOST``, ``PGPORT``, ``PGDATABASE``, ``PGSSLMODE``,
    ``PGCONNECT_TIMEOUT`` as in libpq. Raises ``ValueError`` for what the JDBC
    driver cannot do (Unix-socket hosts, ``hostaddr``, services, libpq-only parameters).
    """
    return _jdbc_parts(as_connection_settings(connection), socket_timeout_s)[0]


def _format_key_list(columns: str | Sequence[str] | None) -> str | None:
    """``upsertkey`` as the native sink writes it: comma-separated; a name with a comma,
    a double quote or outer spaces is double-quoted SQL-style ("" for a quote)."""
    if columns is None:
        return None
    if isinstance(columns, str):
        columns = [columns]
    names = list(columns)
    if not names or any(not isinstance(n, str) or not n for n in names):
        raise ValueError(f"key_columns must be a non-empty list of column names, got {columns!r}")
    out = []
    for name in names:
        if "," in name or '"' in name or name != name.strip():
            name = '"' + name.replace('"', '""') + '"'
        out.append(name)
    return ",".join(out)


def _jvm_handles(df: DataFrame):
    """``(jvm, jdf)`` of a classic (py4j) DataFrame, or a clear error on Spark Connect."""
    try:
        jdf = df._jdf
        jvm = df.sparkSession.sparkContext._jvm
    except Exception as exc:  # Spark Connect raises PySparkAttributeError / NotImplementedError
        raise JvmSinkUnavailable(
            "the JVM sink needs a classic Spark session with py4j access to the JVM; this DataFrame has "
            f"none ({type(exc).__name__}: Spark Connect, serverless, or Databricks standard access "
            "mode). Use a dedicated (single-user) cluster, or the native sink "
            "writeStream.format('postgresql') on Databricks") from None
    if jvm is None:
        raise JvmSinkUnavailable("the Spark session has no JVM gateway (is it stopped?)")
    return jvm, jdf


def _py4j_blocked(exc: BaseException) -> bool:
    text = str(exc)
    return "Py4JSecurityException" in text or "not whitelisted" in text


#: What the JVM sink calls each knob: SinkSettings name → the Java writer's option. The Java writer
#: (rtm_lakebase/jvm/SinkSettings.java) takes SinkSettings' names; it still reads the native sink's
#: spellings (dbtable, upsertkey, batchsize, batchinterval, ...) and logs a deprecation line for each.
JVM_OPTIONS = {name: name for name in (
    "table", "schema", "mode", "key_columns", "version_column", "skip_unchanged", "max_batch_rows", "max_dwell_ms",
    "max_retries", "backoff_initial_ms", "backoff_max_ms", "connection_max_age_s")}
#: Old keyword names of start_jvm_sink_query/build_jvm_writer (the native sink's spelling): still taken, with a warning.
OLD_NAMES = {"upsertkey": ("key_columns", lambda v: (v,) if isinstance(v, str) else v),
             "batchsize": ("max_batch_rows", None), "batchinterval_ms": ("max_dwell_ms", None)}
_DEFAULTS = {"key_columns": (), "max_batch_rows": 1000, "max_dwell_ms": 100}


def jvm_options(settings: SinkSettings) -> dict[str, str]:
    """The Java writer's options for ``settings`` (table and schema already parsed as SQL reads them)."""
    s = settings
    if s.on_failure is not None or s.columns is not None:
        raise ValueError("on_failure and columns are settings of the Python writer; the JVM sink writes every "
                         "column of the DataFrame and reports failures through the query")
    age = s.connection_max_age_s
    if not age <= 2**31 - 1:
        raise ValueError(f"connection_max_age_s must be a number of seconds up to 2**31 - 1 for the JVM sink, "
                         f"got {age!r}")
    values = {"table": s.table, "schema": s.schema, "mode": s.mode,
              "key_columns": _format_key_list(s.key_columns) if s.key_columns else None,
              "version_column": s.version_column, "skip_unchanged": str(bool(s.skip_unchanged)).lower(),
              "max_batch_rows": str(s.max_batch_rows), "max_dwell_ms": str(s.max_dwell_ms),
              "max_retries": str(s.max_retries), "backoff_initial_ms": str(s.backoff_initial_ms),
              "backoff_max_ms": str(s.backoff_max_ms),
              "connection_max_age_s": str(int(age) if float(age).is_integer() else age)}
    if s.schema is None and split_table_name(s.table) != (None, s.table):
        values["table"] = '"' + s.table.replace('"', '""') + '"'  # read back as this one exact name
    return {JVM_OPTIONS[name]: value for name, value in values.items() if value is not None}


def build_jvm_writer(spark: SparkSession, *, dsn: ConnectionSettings | str, table: str,
                     key_columns: Sequence[str] = (), mode: str = "upsert",
                     version_column: str | None = None, schema: str | None = None,
                     skip_unchanged: bool = True, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                     max_retries: int = 6, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000,
                     socket_timeout_s: int = SOCKET_TIMEOUT_S,
                     password_provider_class: str | None = None, append_copy: bool = True,
                     connection_max_age_s: int = 1800, **old_names: Any):
    """The Java ``ForeachWriter<Row>`` (a py4j object) for ``writeStream.foreach``.

    Arguments as in :func:`start_jvm_sink_query`. Checks the classpath and the
    options on the driver, so a wrong setting fails here, not in a task.
    """
    knobs = take_old_names("build_jvm_writer", old_names, OLD_NAMES,
                           {"key_columns": key_columns, "max_batch_rows": max_batch_rows,
                            "max_dwell_ms": max_dwell_ms}, _DEFAULTS)
    for name in ("max_batch_rows", "max_dwell_ms"):
        value = knobs[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    sink = SinkSettings(table=table, schema=schema, mode=mode, key_columns=knobs["key_columns"] or (),
                        version_column=version_column, skip_unchanged=skip_unchanged,
                        max_batch_rows=knobs["max_batch_rows"], max_dwell_ms=knobs["max_dwell_ms"],
                        max_retries=max_retries, backoff_initial_ms=backoff_initial_ms,
                        backoff_max_ms=backoff_max_ms, connection_max_age_s=connection_max_age_s)
    if sink.key_columns and mode == "append":
        raise ValueError("key_columns does not apply to mode='append'")
    settings = as_connection_settings(dsn)
    if settings.password_provider is not None:
        raise ValueError("password_provider is a Python callable and cannot run inside the JVM writer; "
                         "give the JVM sink a password, or password_provider_class= a Java PgPasswordProvider")
    url, user, password = _jdbc_parts(settings, socket_timeout_s)
    if password_provider_class:
        if settings.password:
            raise ValueError("give either a password in the DSN or password_provider_class, not both")
        password = None  # the provider gives it at every connect; PGPASSWORD and .pgpass are not asked
    options = {"url": url, **jvm_options(sink), "append_copy": str(bool(append_copy)).lower()}
    if password_provider_class:
        options["password_provider"] = password_provider_class
    if user:
        options["user"] = user

    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JError
    from pyspark.errors.exceptions.captured import CapturedException

    jvm = spark.sparkContext._jvm
    try:
        writer_class = jvm.rtm_lakebase.jvm.PostgresForeachWriter
        if not isinstance(writer_class, JavaClass):
            raise JvmSinkUnavailable(
                f"class {WRITER_CLASS} is not on the session's classpath: start the session with "
                f"spark.jars set to jvm_sink_jars() (locally), or attach the jar to the cluster; "
                f"if it is not built, {BUILD_HINT}")
        if not isinstance(jvm.org.postgresql.Driver, JavaClass):
            raise JvmSinkUnavailable(
                "the Postgres JDBC driver (org.postgresql.Driver) is not on the session's classpath: add "
                f"its jar to spark.jars (jvm_sink_jars() lists it) or use spark.jars.packages={PG_JDBC_MAVEN}")
        joptions = jvm.java.util.HashMap()
        for key, value in options.items():
            joptions.put(key, value)
        if password:
            joptions.put("password", password)
        return writer_class(joptions)
    except (Py4JError, CapturedException) as exc:
        if _py4j_blocked(exc):
            raise JvmSinkUnavailable(
                "py4j access to JVM classes is blocked here (Databricks standard access mode allows "
                "only allowlisted classes): use a dedicated access mode cluster, or the native sink "
                "writeStream.format('postgresql')") from None
        # Option errors from the Java constructor: the Java message alone, without the secret.
        message = redact(getattr(exc, "java_exception", None) or exc, password).strip()
        raise ValueError(f"the JVM sink refused its options: {(message.splitlines() or ['?'])[0]}") from None


# --8<-- [start:start_jvm_sink_query]
def start_jvm_sink_query(df: DataFrame, *, dsn: ConnectionSettings | str, table: str,
                         checkpoint_location: str, key_columns: Sequence[str] = (),
                         mode: str = "upsert", version_column: str | None = None,
                         schema: str | None = None, skip_unchanged: bool = True,
                         max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                         trigger: Mapping[str, Any] | None = None, query_name: str | None = None,
                         output_mode: str = "update", max_retries: int = 6,
                         backoff_initial_ms: int = 250, backoff_max_ms: int = 5000,
                         socket_timeout_s: int = SOCKET_TIMEOUT_S,
                         password_provider_class: str | None = None,
                         connection_max_age_s: int = 1800, **old_names: Any) -> StreamingQuery:
    """Stream ``df`` into Postgres table ``table`` through the JVM writer; return the running query.

    - ``dsn``: a libpq DSN or URL (``postgresql://user:pass@host:5432/db``) or
      :class:`ConnectionSettings`; TCP hosts only; the password stays out of
      every message and ``toString``.
    - The knobs have the names and meanings of :class:`~rtm_lakebase.sink.SinkSettings`
      (the Python writer's settings); the old names ``upsertkey``, ``batchsize`` and
      ``batchinterval_ms`` still work, with a warning.
    - ``table``: ``"events"``, ``"sales.events"`` or ``'"My.Schema"."Events"'``, read as
      SQL reads a table name; with ``schema`` given, ``table`` is one exact name in it.
      No schema: the connection's ``search_path`` decides.
    - ``mode``: ``"upsert"`` (``INSERT … ON CONFLICT (upsertkey) DO UPDATE``; with
      ``version_column`` only a strictly newer version replaces a row, else
      ``skip_unchanged`` skips identical updates), ``"insert_ignore"``
      (``ON CONFLICT DO NOTHING``) or ``"append"`` (``COPY … FROM STDIN``, or
      ``INSERT`` when a column's Spark type is not the column's own kind).
    - ``key_columns``: column names; ``()`` takes the table's primary key.
    - A flush (one transaction, rows sorted by key) happens when ``max_batch_rows``
      distinct keys are buffered or when the oldest buffered row is
      ``max_dwell_ms`` old, even if no further row arrives. For the lowest
      latency use 5–20 ms; the native sink's default is 100 ms.
    - ``trigger``: keyword arguments of ``DataStreamWriter.trigger``, e.g.
      ``{"realTime": "5 minutes"}`` (the default; the duration is the checkpoint
      interval, not a latency) or ``{"processingTime": "0 seconds"}``.
    - ``max_retries``, ``backoff_initial_ms``, ``backoff_max_ms``: lost connections and
      lock conflicts are retried with jittered backoff, as in the Python writer.
    - ``socket_timeout_s``: a read from Postgres waiting longer counts as a lost
      connection (reconnect and retry) instead of blocking the task forever.
    - ``password_provider_class``: a Java class implementing
      ``rtm_lakebase.jvm.PgPasswordProvider`` (on ``spark.jars``), asked for the
      password (an OAuth token) at every new connection.
    - ``connection_max_age_s``: each executor keeps the connections of tasks that
      ended well for its next tasks; one opened longer ago than this is closed
      instead, so a fresh login (password or token) happens at least that often
      (``0``: one connection per task, no reuse).

    Raises :class:`JvmSinkUnavailable` when the jar, the JDBC driver or py4j
    access is missing, ``ValueError`` for bad options. Delivery is at-least-once
    (replays after a failure); upsert and insert_ignore make replays harmless.
    """
    trigger = dict(trigger) if trigger is not None else {"realTime": "5 minutes"}
    if len(trigger) != 1:
        raise ValueError(f"trigger must have exactly one entry, e.g. {{'realTime': '5 minutes'}}, got {trigger!r}")
    _, jdf = _jvm_handles(df)
    knobs = take_old_names("start_jvm_sink_query", old_names, OLD_NAMES,
                           {"key_columns": key_columns, "max_batch_rows": max_batch_rows,
                            "max_dwell_ms": max_dwell_ms}, _DEFAULTS)
    writer = build_jvm_writer(df.sparkSession, dsn=dsn, table=table, mode=mode, version_column=version_column,
                              schema=schema, skip_unchanged=skip_unchanged, max_retries=max_retries,
                              backoff_initial_ms=backoff_initial_ms, backoff_max_ms=backoff_max_ms,
                              socket_timeout_s=socket_timeout_s, password_provider_class=password_provider_class,
                              connection_max_age_s=connection_max_age_s, **knobs)
    stream = df.writeStream
    stream._jwrite = stream._jwrite.foreach(writer)  # the Java sink replaces PySpark's Python foreach
    stream = (stream.outputMode(output_mode)
              .option("checkpointLocation", checkpoint_location)
              .trigger(**trigger))
    if query_name:
        stream = stream.queryName(query_name)
    return stream.start()
# --8<-- [end:start_jvm_sink_query]


__all__ = ["DEFAULT_JAR", "JvmSinkUnavailable", "PG_JDBC_MAVEN", "WRITER_CLASS", "build_jvm_writer",
           "JVM_OPTIONS", "jdbc_url", "jvm_options", "jvm_sink_jars", "start_jvm_sink_query"]
