"""Upsert into accounts(id text primary key, balance numeric) with psycopg 3.

Plain Python + psycopg 3 (no Spark). A single
INSERT ... ON CONFLICT (id) DO UPDATE is atomic in Postgres, so there is no
read-then-write race between concurrent callers, and calling it twice with
the same arguments leaves the same row (idempotent).
"""
from decimal import Decimal

UPSERT_SQL = """
INSERT INTO accounts (id, balance)
VALUES (%s, %s)
ON CONFLICT (id) DO UPDATE
SET balance = EXCLUDED.balance
"""


def upsert(conn, account_id, balance):
    """Insert (account_id, balance), or set the balance if the id exists.

    `conn` is a psycopg 3 Connection. The statement runs inside
    `conn.transaction()`: on an idle connection this is BEGIN ... COMMIT, so
    the row is durable when the function returns (and rolled back on error);
    if the caller already has a transaction open it becomes a savepoint and
    the caller's transaction decides the commit.
    """
    if isinstance(balance, float):
        # numeric column: pass a Decimal so no binary-float noise is stored
        balance = Decimal(str(balance))
    with conn.transaction():
        with conn.cursor() as cur:
            cur.execute(UPSERT_SQL, (account_id, balance))
