"""A foreach writer that upserts a buffer in one multi-row statement without de-duplicating keys first."""

import psycopg
from psycopg import sql


class EventsWriter:
    def __init__(self, dsn: str, table: str):
        self.dsn, self.table = dsn, table
        self.conn = None
        self.rows = []

    def open(self, partition_id, epoch_id):
        self.conn = psycopg.connect(self.dsn, connect_timeout=10)
        self.rows = []
        return True

    def process(self, row):
        self.rows.append((row["id"], row["version"], row["payload"]))

    def close(self, error):
        try:
            if error is None and self.rows:
                values = sql.SQL(", ").join(sql.SQL("(%s, %s, %s)") for _ in self.rows)
                stmt = sql.SQL(
                    "INSERT INTO {t} AS t (id, version, payload) VALUES {v} "
                    "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
                    "WHERE EXCLUDED.version > t.version").format(t=sql.Identifier(self.table), v=values)
                with self.conn.transaction():
                    self.conn.execute(stmt, [x for r in self.rows for x in r])
        finally:
            if self.conn is not None:
                self.conn.close()
        if error is not None:
            raise error
