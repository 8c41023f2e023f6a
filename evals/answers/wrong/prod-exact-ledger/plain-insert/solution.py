"""Append each payment with a plain INSERT, one transaction per task."""

import psycopg


class PaymentsWriter:
    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        self.conn = psycopg.connect(self.dsn, connect_timeout=5)
        self.rows = []
        return True

    def process(self, row):
        self.rows.append((row["event_id"], row["account"], row["amount"]))

    def close(self, error):
        try:
            if error is None and self.rows:
                with self.conn.cursor() as cur:
                    cur.executemany("INSERT INTO payments (event_id, account, amount) VALUES (%s, %s, %s)",
                                    self.rows)
                self.conn.commit()
        finally:
            self.conn.close()
