"""Flushes every 100 rows on a fresh connection; the connections are closed when the task ends."""

import psycopg


class EventsWriter:
    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        self.rows, self.conns = [], []
        return True

    def _flush(self):
        conn = psycopg.connect(self.dsn, connect_timeout=5)
        self.conns.append(conn)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO events (id, version, payload) VALUES (%s, %s, %s) ON CONFLICT (id) "
                            "DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
                            "WHERE events.version < EXCLUDED.version", self.rows)
        conn.commit()
        self.rows = []

    def process(self, row):
        self.rows.append((row["id"], row["version"], row["payload"]))
        if len(self.rows) >= 100:
            self._flush()

    def close(self, error):
        try:
            if error is None and self.rows:
                self._flush()
        finally:
            for c in self.conns:
                c.close()
