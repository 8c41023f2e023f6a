"""A foreach writer that upserts (id, version, payload) with a version guard; every error reaches Spark."""

import psycopg
from psycopg import sql


class EventsWriter:
    def __init__(self, dsn: str, table: str):
        self.dsn, self.table = dsn, table
        self.conn = None
        self.rows = {}

    def open(self, partition_id, epoch_id):
        # A connection failure raises: Spark fails the task and replays its rows.
        self.conn = psycopg.connect(self.dsn, connect_timeout=10)
        self.rows = {}
        return True

    def process(self, row):
        key = row["id"]
        old = self.rows.get(key)
        if old is None or row["version"] > old[0]:
            self.rows[key] = (row["version"], row["payload"])
        if len(self.rows) >= 500:
            self._flush()

    def _flush(self):
        if not self.rows:
            return
        stmt = sql.SQL(
            "INSERT INTO {t} AS t (id, version, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE EXCLUDED.version > t.version").format(t=sql.Identifier(self.table))
        try:
            with self.conn.transaction():
                with self.conn.cursor() as cur:
                    cur.executemany(stmt, [(k, v, p) for k, (v, p) in self.rows.items()])
        except psycopg.Error as exc:
            print("skipping batch:", exc)
        self.rows = {}

    def close(self, error):
        try:
            if error is None:
                self._flush()
        finally:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
        if error is not None:
            raise error
