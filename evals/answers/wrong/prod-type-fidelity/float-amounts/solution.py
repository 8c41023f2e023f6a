"""A hand-written writer that makes every value "JSON friendly" first: Decimal becomes float."""

from decimal import Decimal

import psycopg
from psycopg import sql


class LedgerWriter:
    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        self.conn = psycopg.connect(self.dsn, connect_timeout=5)
        self.rows = []
        return True

    def process(self, row):
        d = row.asDict()
        self.rows.append({k: float(v) if isinstance(v, Decimal) else v for k, v in d.items()})

    def close(self, error):
        try:
            if error is None and self.rows:
                cols = list(self.rows[0])
                stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (id) DO UPDATE SET {}").format(
                    sql.Identifier(self.table), sql.SQL(", ").join(map(sql.Identifier, cols)),
                    sql.SQL(", ").join(sql.Placeholder() * len(cols)),
                    sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in cols[1:]))
                with self.conn.cursor() as cur:
                    cur.executemany(stmt, [tuple(r[c] for c in cols) for r in self.rows])
                self.conn.commit()
        finally:
            self.conn.close()
