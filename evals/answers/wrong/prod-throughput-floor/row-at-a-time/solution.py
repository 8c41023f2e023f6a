"""One upsert and one commit per row: simple and safe, each row durable as soon as it is processed."""

import psycopg


class EventsWriter:
    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        self.conn = psycopg.connect(self.dsn, connect_timeout=5)
        return True

    def process(self, row):
        self.conn.execute("INSERT INTO events (id, version, payload) VALUES (%s, %s, %s) ON CONFLICT (id) "
                          "DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
                          "WHERE events.version < EXCLUDED.version", (row["id"], row["version"], row["payload"]))
        self.conn.commit()

    def close(self, error):
        self.conn.close()
