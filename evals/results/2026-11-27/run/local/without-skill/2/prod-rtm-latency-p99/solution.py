"""Low-latency real-time-mode sink: stream -> Postgres ``events`` (p99 < 1.5 s).

    q = start(df, "host=... dbname=... user=...", "events", "/chk/events")

Why not a plain Python ``foreach`` writer
-----------------------------------------
In open-source Spark 4.3 a Python foreach writer receives its rows through
``PythonForeachWriter``, which pickles them with
``SerDeUtil.AutoBatchedPickler``: the batch size starts at 1 row and *doubles*
every time a pickled batch is smaller than 1 MiB.  With ~100-byte rows the
batch grows to thousands of rows, and in real-time mode the pickler blocks
until the whole batch has arrived -- at 100 rows/s the delay grows without
bound (measured here: p50 3 s, p99 21 s after half a minute).  Real-time mode
itself hands rows to the sink immediately; the Python hop is the problem.

What this job does instead
--------------------------
* ``trigger(realTime="5 minutes")``, ``outputMode("update")``, sink =
  ``foreach`` with a small **JVM** ``ForeachWriter`` (``ForeachWriterTable`` is
  on the real-time-mode sink allowlist; foreachBatch is not).  Its source is
  embedded below and compiled once with ``javac`` against the Spark jars when
  ``start`` is called; the jar is shipped to executors with ``addJar``.
* The JVM writer's ``process(row)`` writes one line per row to the stdin of a
  Python helper process (started in ``open``, one per task) and flushes --
  no batching on the JVM side.
* The helper (psycopg 3) blocks on stdin, takes *everything* that is pending
  (one row when quiet, a burst when busy), upserts it with one pipelined
  ``executemany`` and commits.  A row therefore waits at most for the commit
  in flight; under load the commit cost is shared.
* Idempotent upsert on ``id`` (``ON CONFLICT (id) DO UPDATE``, identical
  replays are not rewritten); only id, sent_ms, payload are written, so the
  table's other columns keep their defaults.
* Failure handling: a helper error (bad DSN, DB down, constraint violation)
  makes the helper exit non-zero; the next ``process``/``close`` of the JVM
  writer throws, the task fails and Spark replays the epoch (upserts make the
  replay harmless).  ``close(null)`` closes stdin and waits until the helper
  has committed everything and exited 0.
* A long real-time batch duration keeps epoch boundaries (task restart,
  helper restart, checkpoint) out of the latency tail.

If no JDK compiler is available, ``start`` falls back to a pure-Python
foreach writer (same upsert, background commit thread) and warns that the
latency target will not be met in open-source Spark because of the pickler
batching described above.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
import zipfile
from typing import Any, List, Optional

BATCH_DURATION = "5 minutes"
JAVA_CLASS = "rtmsink.RtmPgForeachWriter"

# --------------------------------------------------------------------------
# Python helper run by the JVM writer (env RTM_SINK_DSN; argv: table, application_name). Reads lines
# "id \t sent_ms \t base64(payload)" ("\N" = NULL) from stdin.
# --------------------------------------------------------------------------
HELPER_SCRIPT = r'''
import base64, os, select, sys
import psycopg
from psycopg import sql

dsn = os.environ["RTM_SINK_DSN"]          # not on the command line (ps would show it)
table = sys.argv[1]
app = sys.argv[2] if len(sys.argv) > 2 else "rtm-events-sink"
conn = psycopg.connect(dsn, autocommit=False, application_name=app)
stmt = sql.SQL(
    "INSERT INTO {t} AS e (id, sent_ms, payload) VALUES (%s, %s, %s) "
    "ON CONFLICT (id) DO UPDATE SET sent_ms = EXCLUDED.sent_ms, payload = EXCLUDED.payload "
    "WHERE (e.sent_ms, e.payload) IS DISTINCT FROM (EXCLUDED.sent_ms, EXCLUDED.payload)"
).format(t=sql.Identifier(*table.split(".")))

def field_int(b):
    return None if b == b"\\N" else int(b)

def parse(line):
    a, b, c = line.split(b"\t")
    payload = None if c == b"\\N" else base64.b64decode(c).decode("utf-8")
    return (field_int(a), field_int(b), payload)

fd = sys.stdin.fileno()
buf = b""
eof = False
while not eof:
    chunk = os.read(fd, 1 << 16)          # blocks until at least one row
    if not chunk:
        eof = True
    buf += chunk
    while not eof and select.select([fd], [], [], 0)[0]:
        more = os.read(fd, 1 << 16)         # take whatever else is already there
        if not more:
            eof = True
        buf += more
    lines = buf.split(b"\n")
    buf = lines.pop()
    rows = [parse(l) for l in lines if l]
    if rows:
        with conn.cursor() as cur:
            cur.executemany(stmt, rows)
        conn.commit()
if buf.strip():
    sys.stderr.write("rtm-events-sink: truncated input line, not committed\n")
    sys.exit(3)
conn.close()
'''

JAVA_SOURCE = r'''
package rtmsink;

import java.io.BufferedOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

public class RtmPgForeachWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;
  private final String python;
  private final String script;
  private final String dsn;
  private final String table;
  private final String appName;
  private transient Process proc;
  private transient OutputStream out;

  public RtmPgForeachWriter(String python, String script, String dsn, String table,
                            String appName) {
    this.python = python; this.script = script; this.dsn = dsn; this.table = table;
    this.appName = appName;
  }

  private String pythonExe() {
    if (python != null && !python.isEmpty() && new File(python).canExecute()) return python;
    String env = System.getenv("PYSPARK_PYTHON");
    return (env != null && !env.isEmpty()) ? env : "python3";
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    try {
      ProcessBuilder pb = new ProcessBuilder(pythonExe(), "-u", "-c", script, table, appName);
      pb.environment().put("RTM_SINK_DSN", dsn);
      pb.redirectError(ProcessBuilder.Redirect.INHERIT);
      pb.redirectOutput(ProcessBuilder.Redirect.INHERIT);
      proc = pb.start();
      out = new BufferedOutputStream(proc.getOutputStream(), 1 << 16);
      return true;
    } catch (IOException e) {
      throw new RuntimeException("rtm-events-sink: cannot start helper " + pythonExe(), e);
    }
  }

  private static void num(StringBuilder sb, Row row, int i) {
    if (row.isNullAt(i)) sb.append("\\N"); else sb.append(row.get(i).toString());
  }

  @Override
  public void process(Row row) {
    StringBuilder sb = new StringBuilder(128);
    num(sb, row, 0); sb.append('\t');
    num(sb, row, 1); sb.append('\t');
    if (row.isNullAt(2)) sb.append("\\N");
    else sb.append(Base64.getEncoder().encodeToString(
        row.get(2).toString().getBytes(StandardCharsets.UTF_8)));
    sb.append('\n');
    try {
      out.write(sb.toString().getBytes(StandardCharsets.US_ASCII));
      out.flush();
    } catch (IOException e) {
      throw new RuntimeException(helperState("write failed"), e);
    }
  }

  private String helperState(String what) {
    String s = "rtm-events-sink: " + what;
    if (proc != null && !proc.isAlive()) s += "; helper exited with code " + proc.exitValue()
        + " (see executor stderr)";
    return s;
  }

  @Override
  public void close(Throwable errorOrNull) {
    if (proc == null) return;
    try {
      if (errorOrNull == null) {
        try { out.close(); } catch (IOException e) {
          throw new RuntimeException(helperState("closing helper input failed"), e);
        }
        int rc = proc.waitFor();
        if (rc != 0) throw new RuntimeException(
            "rtm-events-sink: helper failed with exit code " + rc + " (see executor stderr)");
      } else {
        proc.destroy();
      }
    } catch (InterruptedException e) {
      proc.destroyForcibly();
      Thread.currentThread().interrupt();
      throw new RuntimeException("rtm-events-sink: interrupted while waiting for helper", e);
    } finally {
      proc = null;
    }
  }
}
'''


# --------------------------------------------------------------------------
# building / loading the JVM writer
# --------------------------------------------------------------------------
def _spark_jars_dir() -> Optional[str]:
    home = os.environ.get("SPARK_HOME")
    cands = []
    if home:
        cands.append(os.path.join(home, "jars"))
    try:
        import pyspark

        cands.append(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    except Exception:
        pass
    for c in cands:
        if os.path.isdir(c):
            return c
    return None


def _javac() -> Optional[str]:
    jh = os.environ.get("JAVA_HOME")
    if jh and os.access(os.path.join(jh, "bin", "javac"), os.X_OK):
        return os.path.join(jh, "bin", "javac")
    return shutil.which("javac")


def _build_jar() -> str:
    javac, jars = _javac(), _spark_jars_dir()
    if not javac or not jars:
        raise RuntimeError("javac or Spark jars not found")
    digest = hashlib.sha256(JAVA_SOURCE.encode()).hexdigest()[:16]
    root = os.path.join(tempfile.gettempdir(), "rtm_pg_sink_%s_%d" % (digest, os.getuid()))
    jar = os.path.join(root, "rtm-pg-sink-%s.jar" % digest)
    if os.path.exists(jar):
        return jar
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(dir=root)
    src = os.path.join(work, "rtmsink", "RtmPgForeachWriter.java")
    os.makedirs(os.path.dirname(src))
    with open(src, "w") as f:
        f.write(JAVA_SOURCE)
    classes = os.path.join(work, "classes")
    subprocess.run([javac, "-nowarn", "--release", "17", "-cp", os.path.join(jars, "*"),
                    "-d", classes, src], check=True, capture_output=True, timeout=120)
    tmp_jar = jar + ".tmp%d" % os.getpid()
    with zipfile.ZipFile(tmp_jar, "w") as z:
        for base, _dirs, files in os.walk(classes):
            for fn in files:
                full = os.path.join(base, fn)
                z.write(full, os.path.relpath(full, classes))
    os.replace(tmp_jar, jar)
    return jar


def _jvm_writer(spark, dsn: str, table: str, app_name: str):
    jar = _build_jar()
    sc = spark.sparkContext
    sc._jsc.sc().addJar(jar)                    # executors load the class from here
    jvm, gw = sc._jvm, sc._gateway
    urls = gw.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(jar).toURI().toURL()
    parent = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    loader = jvm.java.net.URLClassLoader(urls, parent)
    cls = jvm.java.lang.Class.forName(JAVA_CLASS, True, loader)
    args = gw.new_array(jvm.java.lang.Object, 5)
    args[0], args[1], args[2], args[3], args[4] = sys.executable, HELPER_SCRIPT, dsn, table, app_name
    return cls.getConstructors()[0].newInstance(args)


# --------------------------------------------------------------------------
# pure-Python fallback (correct, but subject to the pickler batching delay)
# --------------------------------------------------------------------------
_STOP = object()


def _get(row: Any, name: str) -> Any:
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError):
        return getattr(row, name, None)


class PyEventsWriter:
    def __init__(self, dsn: str, table: str, app_name: str = "rtm-events-sink"):
        self.dsn, self.table, self.app_name = dsn, table, app_name
        self._q = self._thread = self._conn = self._error = None

    def __getstate__(self):
        st = self.__dict__.copy()
        st.update(_q=None, _thread=None, _conn=None, _error=None)
        return st

    def open(self, partition_id, epoch_id):
        import psycopg
        from psycopg import sql

        self._conn = psycopg.connect(self.dsn, autocommit=False,
                                     application_name=self.app_name)
        self._sql = sql.SQL(
            "INSERT INTO {t} AS e (id, sent_ms, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET sent_ms = EXCLUDED.sent_ms, payload = EXCLUDED.payload "
            "WHERE (e.sent_ms, e.payload) IS DISTINCT FROM (EXCLUDED.sent_ms, EXCLUDED.payload)"
        ).format(t=sql.Identifier(*self.table.split(".")))
        self._q, self._error = queue.SimpleQueue(), None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return True

    def process(self, row):
        if self._error is not None:
            raise self._error
        self._q.put((_get(row, "id"), _get(row, "sent_ms"), _get(row, "payload")))

    def close(self, error):
        try:
            if self._q is not None:
                self._q.put(_STOP)
                self._thread.join()
            if error is None and self._error is not None:
                raise self._error
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _run(self):
        stop = False
        try:
            while not stop:
                item = self._q.get()
                batch: List[tuple] = []
                while True:
                    if item is _STOP:
                        stop = True
                    else:
                        batch.append(item)
                    if stop:
                        break
                    try:
                        item = self._q.get_nowait()
                    except queue.Empty:
                        break
                if batch:
                    with self._conn.cursor() as cur:
                        cur.executemany(self._sql, batch)
                    self._conn.commit()
        except BaseException as exc:
            self._error = exc


# --------------------------------------------------------------------------
def _wait_until_sink_ready(q, dsn: str, app_name: str, timeout_s: float) -> None:
    """Return once the sink tasks have connected to Postgres (or on timeout).

    In real-time mode every task of the query is scheduled at once and opens
    its writer before the first row; waiting for those sessions means the
    pipeline is live when ``start`` returns, so the producer's first rows do
    not pay for query planning, task launch, helper start-up and connects.
    """
    import time

    try:
        import psycopg
    except Exception:
        return
    deadline = time.monotonic() + timeout_s
    last, stable = -1, 0
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
            while time.monotonic() < deadline and q.isActive:
                n = c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                              (app_name,)).fetchone()[0]
                stable = stable + 1 if (n > 0 and n == last) else 0
                if stable >= 3:          # same non-zero count for ~1.5 s
                    return
                last = n
                time.sleep(0.5)
    except Exception:
        return


def start(df, dsn: str, table: str, checkpoint: str, wait_ready_s: float = 90.0):
    """Start the real-time query writing ``df`` (id, sent_ms, payload) to ``table``.

    Returns the StreamingQuery once its sink tasks are connected (at most
    ``wait_ready_s`` seconds; 0 = return immediately).
    """
    import uuid

    app_name = "rtm-events-sink-" + uuid.uuid4().hex[:12]
    out = df.select("id", "sent_ms", "payload")
    writer = out.writeStream.queryName("events_to_postgres_rtm").outputMode("update")
    try:
        jwriter = _jvm_writer(df.sparkSession, dsn, table, app_name)
        writer._jwrite = writer._jwrite.foreach(jwriter)
    except Exception as exc:  # no JDK compiler etc.
        warnings.warn("rtm sink: JVM writer unavailable (%s); using the Python foreach "
                      "writer, whose pickled batches grow and add latency in OSS Spark" % exc)
        writer = writer.foreach(PyEventsWriter(dsn, table, app_name))
    q = (
        writer
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=BATCH_DURATION)
        .start()
    )
    if wait_ready_s:
        _wait_until_sink_ready(q, dsn, app_name, wait_ready_s)
    return q
