"""Real-time-mode sink: price updates -> Postgres ``events`` with p99 < 1.5 s.

    start(df, dsn, table, checkpoint) -> StreamingQuery

Why not a Python ``foreach`` writer
-----------------------------------
In open-source Spark 4.3 the Python foreach sink (PythonForeachWriter) hands
rows to the Python worker through ``SerDeUtil.AutoBatchedPickler``, whose batch
size doubles (1, 2, 4, ... rows) while batches stay small, plus a buffered
socket.  At ~100 rows/s the rows therefore reach Python only in ever larger
bursts / at the end of the real-time batch.  Measured here with
``trigger(realTime="5 seconds")``: p50 9.6 s, max 12.8 s from arrival to
``process()`` - the SLO cannot be met that way, whatever the Python code does.

What this does instead
----------------------
A tiny JVM ``ForeachWriter<Row>`` (Java source below) is compiled once with the
JDK's ``javac`` against the PySpark jars and the PostgreSQL JDBC driver,
shipped with ``SparkContext.addJar`` and attached with the JVM
``DataStreamWriter.foreach``.  In real-time mode each row reaches
``process()`` as soon as it is read, and is written with one prepared,
autocommitted upsert::

    INSERT INTO <table> (id, sent_ms, payload) VALUES (?, ?, ?)
    ON CONFLICT (id) DO UPDATE SET sent_ms = EXCLUDED.sent_ms,
                                   payload = EXCLUDED.payload

So the row is committed (visible to readers) ~1-3 ms after Spark reads it.
Upsert on the primary key makes replays after a failure idempotent.  Other
columns of the table keep their defaults (only the three columns are named).
A broken connection is re-opened once and the row retried; any other error
fails the task (no silent loss).

The query runs with ``outputMode("update")`` (the only mode real-time mode
accepts) and ``trigger(realTime="5 minutes")`` - in real-time mode the trigger
duration is only the checkpoint interval, not a latency; a long one means
fewer batch boundaries (each boundary restarts the tasks and reconnects).

Requirements: a JDK (``javac``; ``JAVA_HOME`` or PATH) and a PostgreSQL JDBC
jar, found from ``PG_JDBC_JAR``, ``spark.jars``, /usr/share/java,
~/.m2, ~/.ivy2 (or pip-installed pyspark jars dir).  If either is missing the
code falls back to a Python foreach writer (correct, but it cannot meet the
latency SLO for the reason above) and logs a warning.
"""

from __future__ import annotations

import base64
import getpass
import glob
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile

log = logging.getLogger(__name__)

CLASS_NAME = "rtmsink.PgUpsertForeachWriter"
TRIGGER = "5 minutes"

JAVA_SOURCE = r'''
package rtmsink;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Types;
import java.util.Base64;
import java.util.Properties;

import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/** Autocommitted per-row upsert into Postgres; one connection per running task. */
public class PgUpsertForeachWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;

  private final String url;
  private final Properties props = new Properties();
  private final String sql;

  private transient Connection conn;
  private transient PreparedStatement ps;
  // start() projects exactly (id, sent_ms, payload) in this order.
  private static final int iId = 0, iSent = 1, iPayload = 2;

  /** cfg: lines "key=base64(value)"; keys: url, sql, prop.<name>. */
  public PgUpsertForeachWriter(String cfg) {
    String u = null, s = null;
    for (String line : cfg.split("\n")) {
      if (line.isEmpty()) continue;
      int eq = line.indexOf('=');
      String k = line.substring(0, eq);
      String v = new String(Base64.getDecoder().decode(line.substring(eq + 1)), StandardCharsets.UTF_8);
      if (k.equals("url")) u = v;
      else if (k.equals("sql")) s = v;
      else if (k.startsWith("prop.")) props.setProperty(k.substring(5), v);
    }
    this.url = u;
    this.sql = s;
  }

  private void connect() throws SQLException {
    closeQuietly();
    Connection c = new org.postgresql.Driver().connect(url, props);
    if (c == null) throw new SQLException("JDBC URL not accepted: " + url);
    c.setAutoCommit(true);
    conn = c;
    ps = c.prepareStatement(sql);
  }

  private void closeQuietly() {
    try { if (ps != null) ps.close(); } catch (Exception e) { /* ignore */ }
    try { if (conn != null) conn.close(); } catch (Exception e) { /* ignore */ }
    ps = null;
    conn = null;
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    try {
      connect();
      return true;
    } catch (SQLException e) {
      throw new RuntimeException("cannot connect to Postgres: " + e.getMessage(), e);
    }
  }

  private void bind(Row r) throws SQLException {
    if (r.isNullAt(iId)) ps.setNull(1, Types.BIGINT); else ps.setLong(1, ((Number) r.get(iId)).longValue());
    if (r.isNullAt(iSent)) ps.setNull(2, Types.BIGINT); else ps.setLong(2, ((Number) r.get(iSent)).longValue());
    if (r.isNullAt(iPayload)) ps.setNull(3, Types.VARCHAR); else ps.setString(3, r.get(iPayload).toString());
  }

  @Override
  public void process(Row r) {
    try {
      bind(r);
      ps.executeUpdate();
    } catch (SQLException e) {
      String state = e.getSQLState();
      boolean connLost = (state != null && state.startsWith("08"));
      try { connLost = connLost || conn == null || conn.isClosed(); } catch (SQLException ignored) { connLost = true; }
      if (!connLost) throw new RuntimeException("upsert failed for id=" + (r.isNullAt(iId) ? "null" : r.get(iId)) + ": " + e.getMessage(), e);
      try {          // one reconnect + retry; idempotent upsert makes this safe
        connect();
        bind(r);
        ps.executeUpdate();
      } catch (SQLException e2) {
        throw new RuntimeException("upsert failed after reconnect: " + e2.getMessage(), e2);
      }
    }
  }

  @Override
  public void close(Throwable errorOrNull) {
    closeQuietly();
  }
}
'''


# --------------------------------------------------------------------------- DSN
def _dsn_to_jdbc(dsn: str) -> tuple[str, dict]:
    """libpq connection string/URI -> (jdbc url, jdbc properties)."""
    from psycopg.conninfo import conninfo_to_dict

    d = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    host = d.get("host") or d.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = str(d.get("port") or os.environ.get("PGPORT") or "5432")
    user = d.get("user") or os.environ.get("PGUSER") or getpass.getuser()
    dbname = d.get("dbname") or os.environ.get("PGDATABASE") or user
    hosts = host.split(",")
    ports = port.split(",")
    parts = []
    for i, h in enumerate(hosts):
        p = ports[i] if i < len(ports) else ports[-1]
        if h.startswith("/") or h.startswith("@"):
            h = "localhost"  # pgjdbc has no unix-socket support: use TCP on the same port
        if ":" in h and not h.startswith("["):
            h = f"[{h}]"
        parts.append(f"{h}:{p}")
    url = f"jdbc:postgresql://{','.join(parts)}/{dbname}"
    props = {"user": user, "ApplicationName": "rtm-events-sink", "tcpKeepAlive": "true"}
    pw = d.get("password") or os.environ.get("PGPASSWORD")
    if pw:
        props["password"] = pw
    for k in ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "options",
              "target_session_attrs"):
        if k in d:
            jk = {"connect_timeout": "connectTimeout",
                  "target_session_attrs": "targetServerType"}.get(k, k)
            v = d[k]
            if k == "target_session_attrs":
                v = {"read-write": "primary", "any": "any"}.get(v, v)
            props[jk] = v
    return url, props


def _quote_table(table: str) -> str:
    """'events' / 'schema.events' -> safely double-quoted identifier."""
    parts = [p for p in table.split(".") if p]
    if not parts or len(parts) > 2:
        raise ValueError(f"bad table name: {table!r}")
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


# --------------------------------------------------------------------------- JVM
def _find_javac() -> str | None:
    jh = os.environ.get("JAVA_HOME")
    if jh and os.path.exists(os.path.join(jh, "bin", "javac")):
        return os.path.join(jh, "bin", "javac")
    return shutil.which("javac")


def _find_jdbc_jar(spark) -> str | None:
    cands = []
    if os.environ.get("PG_JDBC_JAR"):
        cands.append(os.environ["PG_JDBC_JAR"])
    try:
        for j in (spark.conf.get("spark.jars", "") or "").split(","):
            if "postgresql" in j:
                cands.append(j.replace("file:", ""))
    except Exception:
        pass
    import pyspark

    pj = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    cands += sorted(glob.glob(os.path.join(pj, "postgresql*.jar")), reverse=True)
    cands += ["/usr/share/java/postgresql.jar"]
    cands += sorted(glob.glob("/usr/share/java/postgresql-*.jar"), reverse=True)
    home = os.path.expanduser("~")
    cands += sorted(glob.glob(f"{home}/.m2/repository/org/postgresql/postgresql/*/postgresql-*.jar"), reverse=True)
    cands += sorted(glob.glob(f"{home}/.ivy2*/jars/org.postgresql_postgresql-*.jar"), reverse=True)
    for c in cands:
        if c and os.path.isfile(c) and zipfile.is_zipfile(c):
            try:
                with zipfile.ZipFile(c) as z:
                    if "org/postgresql/Driver.class" in z.namelist():
                        return os.path.abspath(c)
            except Exception:
                continue
    return None


def _build_jar(javac: str, jdbc_jar: str) -> str:
    import pyspark

    spark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    key = hashlib.sha256((JAVA_SOURCE + jdbc_jar + spark_jars).encode()).hexdigest()[:16]
    out_dir = os.path.join(tempfile.gettempdir(), f"rtm-pg-sink-{os.getuid()}-{key}")
    jar = os.path.join(out_dir, "rtm-pg-sink.jar")
    if os.path.isfile(jar):
        return jar
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(dir=out_dir)
    src = os.path.join(work, "src", "rtmsink")
    os.makedirs(src)
    with open(os.path.join(src, "PgUpsertForeachWriter.java"), "w") as f:
        f.write(JAVA_SOURCE)
    classes = os.path.join(work, "classes")
    os.makedirs(classes)
    cp = os.pathsep.join([os.path.join(spark_jars, "*"), jdbc_jar])
    subprocess.run([javac, "-nowarn", "--release", "17", "-cp", cp, "-d", classes,
                    os.path.join(src, "PgUpsertForeachWriter.java")],
                   check=True, capture_output=True, text=True)
    tmp_jar = os.path.join(work, "rtm-pg-sink.jar")
    with zipfile.ZipFile(tmp_jar, "w") as z:
        for root, _, files in os.walk(classes):
            for fn in files:
                full = os.path.join(root, fn)
                z.write(full, os.path.relpath(full, classes))
    os.replace(tmp_jar, jar)  # atomic: concurrent builders never see half a jar
    return jar


def _jvm_writer(spark, jars: list[str], cfg: str):
    """Instantiate the Java writer on the driver from our jar + the JDBC jar."""
    sc = spark.sparkContext
    jvm = sc._jvm
    gw = sc._gateway
    for j in jars:                      # executors load the classes from here
        sc._jsc.sc().addJar(j)
    urls = gw.new_array(jvm.java.net.URL, len(jars))
    for i, j in enumerate(jars):
        urls[i] = jvm.java.io.File(j).toURI().toURL()
    parent = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    loader = jvm.java.net.URLClassLoader(urls, parent)
    cls = jvm.java.lang.Class.forName(CLASS_NAME, True, loader)
    ctypes = gw.new_array(jvm.java.lang.Class, 1)
    ctypes[0] = jvm.java.lang.Class.forName("java.lang.String")
    args = gw.new_array(jvm.java.lang.Object, 1)
    args[0] = cfg
    return cls.getConstructor(ctypes).newInstance(args)


def _wait_until_sink_connected(q, dsn, app_name, timeout_s=90.0):
    """Return once the real-time tasks are running (their writers are connected).

    start() of a real-time query returns before its long-running tasks are
    scheduled; rows produced in that window wait for task launch (seconds on a
    busy cluster) and show up as latency outliers.  Waiting until the sink's
    connections are visible in pg_stat_activity removes that start-up gap.
    Best effort: gives up silently after timeout_s or on any error.
    """
    import time

    try:
        import psycopg

        deadline = time.time() + timeout_s
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
            seen_at = None
            while time.time() < deadline and q.isActive:
                n = c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                              (app_name,)).fetchone()[0]
                if n > 0 and seen_at is None:
                    seen_at = time.time()
                if seen_at is not None and time.time() - seen_at >= 1.0:
                    return  # give the other partitions' tasks a moment too
                time.sleep(0.05)
    except Exception as exc:  # pragma: no cover
        log.info("could not confirm sink start-up: %s", exc)


# --------------------------------------------------------------------------- fallback
class _PyUpsertWriter:
    """Python foreach fallback (correct, but OSS batches rows to Python)."""

    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        import psycopg

        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.q = (f"INSERT INTO {_quote_table(self.table)} (id, sent_ms, payload) "
                  "VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                  "sent_ms = EXCLUDED.sent_ms, payload = EXCLUDED.payload")
        return True

    def process(self, row):
        self.conn.execute(self.q, (row["id"], row["sent_ms"], row["payload"]))

    def close(self, error):
        c = getattr(self, "conn", None)
        if c is not None:
            c.close()


# --------------------------------------------------------------------------- entry point
def start(df, dsn, table, checkpoint):
    from pyspark.sql.streaming.query import StreamingQuery

    spark = df.sparkSession
    dsw = (df.select("id", "sent_ms", "payload")
             .writeStream
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime=TRIGGER))

    javac = _find_javac()
    jdbc_jar = _find_jdbc_jar(spark)
    if javac and jdbc_jar:
        try:
            jar = _build_jar(javac, jdbc_jar)
            url, props = _dsn_to_jdbc(dsn)
            props["ApplicationName"] = "rtm-events-sink-" + hashlib.sha1(
                f"{table}|{checkpoint}|{os.getpid()}|{id(df)}".encode()).hexdigest()[:12]
            sql_text = (f"INSERT INTO {_quote_table(table)} (id, sent_ms, payload) "
                        "VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                        "sent_ms = EXCLUDED.sent_ms, payload = EXCLUDED.payload")
            enc = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
            lines = [f"url={enc(url)}", f"sql={enc(sql_text)}"]
            lines += [f"prop.{k}={enc(str(v))}" for k, v in props.items()]
            jwriter = _jvm_writer(spark, [jar, jdbc_jar], "\n".join(lines))
            jq = dsw._jwrite.foreach(jwriter).start()
            q = StreamingQuery(jq)
            _wait_until_sink_connected(q, dsn, props["ApplicationName"])
            return q
        except Exception as exc:  # pragma: no cover - environment problem
            log.warning("JVM Postgres writer unavailable (%s); falling back to Python "
                        "foreach, which cannot meet sub-second latency in OSS RTM", exc)
    else:
        log.warning("javac or PostgreSQL JDBC jar not found; falling back to Python foreach "
                    "writer, which cannot meet sub-second latency in OSS real-time mode")
    return dsw.foreach(_PyUpsertWriter(dsn, table)).start()


__all__ = ["start"]
