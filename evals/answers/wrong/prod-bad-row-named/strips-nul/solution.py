"""Cleans text before writing: NUL bytes are removed so Postgres accepts the row."""

import psycopg


class ReadingsWriter:
    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        self.conn = psycopg.connect(self.dsn, connect_timeout=5)
        self.rows = []
        return True

    def process(self, row):
        note = row["note"].replace("\x00", "") if row["note"] is not None else None
        self.rows.append((row["id"], row["sensor"], row["score"], note))

    def close(self, error):
        try:
            if error is None and self.rows:
                with self.conn.cursor() as cur:
                    cur.executemany("INSERT INTO readings (id, sensor, score, note) VALUES (%s, %s, %s, %s) "
                                    "ON CONFLICT (id) DO UPDATE SET sensor = EXCLUDED.sensor, score = EXCLUDED.score, "
                                    "note = EXCLUDED.note", self.rows)
                self.conn.commit()
        finally:
            self.conn.close()
