"""Bulk-rate foreach writer for ``events`` (newest version wins).

    query = (df.writeStream
               .foreach(EventsWriter(dsn, "events"))
               .outputMode("update")
               .trigger(realTime="5 minutes")
               .option("checkpointLocation", ckpt)
               .start())

How it reaches bulk-load speed:

* ``process()`` only appends the row to an in-memory buffer (no round trip).
* The buffer is flushed with ``COPY ... FROM STDIN`` into a session-local
  temp staging table, followed by ONE set-based merge::

      INSERT INTO events AS t (id, version, payload)
      SELECT DISTINCT ON (id) id, version, payload FROM stage
      ORDER BY id, version DESC NULLS LAST
      ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version,
                                     payload = EXCLUDED.payload
      WHERE t.version IS NULL OR t.version < EXCLUDED.version

  and a single COMMIT.  30,000 rows are therefore a handful of COPY
  statements and merges instead of 30,000 INSERT round trips.
  ``DISTINCT ON`` keeps only the newest version of an id inside one flush
  (ON CONFLICT cannot touch the same row twice in one statement); the
  ``WHERE`` makes an older version never overwrite a newer one, so replays
  and out-of-order delivery are harmless.
* A flush happens when the buffer reaches ``max_rows`` (default 5,000),
  when the oldest buffered row is older than ``max_delay_ms`` (default
  100 ms -- a small background thread checks this, because in real-time mode
  a task lives for the whole batch and ``close()`` may be minutes away), and
  in ``close()``.
* Any flush error is raised (from ``process``/``close``), the transaction is
  rolled back, and the task fails; nothing is swallowed.

Works with psycopg2 (preferred when installed) or psycopg 3.
"""

import io
import threading
import time


def _quote_ident(name):
    parts = name.split(".")
    return ".".join('"' + p.strip('"').replace('"', '""') + '"' for p in parts)


def _copy_text(value):
    """Encode one value for COPY text format."""
    if value is None:
        return "\\N"
    s = value if isinstance(value, str) else str(value)
    if "\\" in s or "\t" in s or "\n" in s or "\r" in s:
        s = (
            s.replace("\\", "\\\\")
            .replace("\t", "\\t")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
    return s


class _Conn:
    """Tiny adapter over psycopg2 / psycopg 3 (COPY differs between them)."""

    def __init__(self, dsn):
        try:
            import psycopg2  # type: ignore

            self.kind = 2
            self.conn = psycopg2.connect(dsn)
            self.conn.autocommit = False
        except ImportError:
            import psycopg  # type: ignore

            self.kind = 3
            self.conn = psycopg.connect(dsn, autocommit=False)

    def copy_in(self, sql, text):
        cur = self.conn.cursor()
        try:
            if self.kind == 2:
                cur.copy_expert(sql, io.StringIO(text))
            else:
                with cur.copy(sql) as cp:
                    cp.write(text)
        finally:
            cur.close()

    def execute(self, sql):
        cur = self.conn.cursor()
        try:
            cur.execute(sql)
        finally:
            cur.close()

    def commit(self):
        self.conn.commit()

    def rollback(self):
        try:
            self.conn.rollback()
        except Exception:
            pass

    def close(self):
        try:
            self.conn.close()
        except Exception:
            pass


class EventsWriter:
    """PySpark ForeachWriter-style object (open / process / close)."""

    def __init__(self, dsn, table="events", max_rows=5000, max_delay_ms=100):
        self.dsn = dsn
        self.table = table
        self.max_rows = int(max_rows)
        self.max_delay = max_delay_ms / 1000.0
        self._reset_runtime()

    def _reset_runtime(self):
        self._db = None
        self._buf = []
        self._first_ts = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._bg_error = None

    def __getstate__(self):
        st = dict(self.__dict__)
        for k in ("_db", "_lock", "_stop", "_thread", "_bg_error"):
            st[k] = None
        st["_buf"] = []
        st["_first_ts"] = None
        return st

    # -- ForeachWriter protocol -------------------------------------------
    def open(self, partition_id, epoch_id):
        self.partition_id = partition_id
        self.epoch_id = epoch_id
        self._reset_runtime()
        self._lock = threading.Lock()
        self._db = _Conn(self.dsn)
        t = _quote_ident(self.table)
        self._stage = "_events_stage"
        self._db.execute(
            "CREATE TEMP TABLE IF NOT EXISTS %s "
            "(id text, version bigint, payload text) ON COMMIT DELETE ROWS"
            % self._stage
        )
        self._db.commit()
        self._copy_sql = "COPY %s (id, version, payload) FROM STDIN" % self._stage
        self._merge_sql = (
            "INSERT INTO %s AS t (\"id\", \"version\", \"payload\") "
            "SELECT DISTINCT ON (id) id, version, payload FROM %s "
            "ORDER BY id, version DESC NULLS LAST "
            "ON CONFLICT (\"id\") DO UPDATE SET "
            "\"version\" = EXCLUDED.\"version\", \"payload\" = EXCLUDED.\"payload\" "
            "WHERE t.\"version\" IS NULL OR t.\"version\" < EXCLUDED.\"version\""
            % (t, self._stage)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ticker, daemon=True)
        self._thread.start()
        return True

    def process(self, row):
        if self._bg_error is not None:
            raise self._bg_error
        line = "%s\t%s\t%s\n" % (
            _copy_text(row["id"]),
            _copy_text(row["version"]),
            _copy_text(row["payload"]),
        )
        with self._lock:
            if not self._buf:
                self._first_ts = time.monotonic()
            self._buf.append(line)
            if len(self._buf) >= self.max_rows:
                self._flush_locked()

    def close(self, error):
        try:
            if self._stop is not None:
                self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=30)
            if error is None and self._db is not None:
                if self._bg_error is not None:
                    raise self._bg_error
                with self._lock:
                    self._flush_locked()
        finally:
            if self._db is not None:
                if error is not None:
                    self._db.rollback()
                self._db.close()
            self._db = None
        # If ``error`` is set, PySpark re-raises it after close().

    # -- internals -----------------------------------------------------------
    def _ticker(self):
        while not self._stop.wait(self.max_delay / 2.0):
            try:
                with self._lock:
                    if self._buf and time.monotonic() - self._first_ts >= self.max_delay:
                        self._flush_locked()
            except Exception as exc:  # surfaced by process()/close()
                self._bg_error = exc
                return

    def _flush_locked(self):
        if not self._buf:
            return
        rows = self._buf
        try:
            self._db.copy_in(self._copy_sql, "".join(rows))
            self._db.execute(self._merge_sql)
            self._db.commit()  # ON COMMIT DELETE ROWS empties the stage
        except Exception as exc:
            self._db.rollback()
            raise RuntimeError(
                "events bulk upsert of %d rows failed (partition %s, epoch %s): %s"
                % (len(rows), self.partition_id, self.epoch_id, exc)
            ) from exc
        self._buf = []
        self._first_ts = None
