"""Idempotent inserts (ON CONFLICT DO NOTHING); a failed write is logged so the stream keeps running."""

import logging

import psycopg

log = logging.getLogger(__name__)


class PaymentsWriter:
    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        try:
            self.conn = psycopg.connect(self.dsn, connect_timeout=5, autocommit=True)
        except psycopg.Error:
            log.exception("cannot connect")
            self.conn = None
        return True

    def process(self, row):
        if self.conn is None:
            return
        try:
            self.conn.execute("INSERT INTO payments (event_id, account, amount) VALUES (%s, %s, %s) "
                              "ON CONFLICT (event_id) DO NOTHING", (row["event_id"], row["account"], row["amount"]))
        except psycopg.Error:
            log.exception("write failed")

    def close(self, error):
        if self.conn is not None:
            self.conn.close()
