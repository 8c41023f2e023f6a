"""Upsert an account balance with psycopg 3 (plain Python, no Spark).

Table: accounts(id text primary key, balance numeric)

One statement, INSERT ... ON CONFLICT (id) DO UPDATE, so the insert-or-update is atomic in Postgres:
no read-then-write race between concurrent callers, no duplicate-key error.
"""

from decimal import Decimal

import psycopg

_UPSERT = (
    "INSERT INTO accounts (id, balance) VALUES (%s, %s) "
    "ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance"
)


def _as_numeric(balance):
    # floats are converted through their shortest repr so 0.1 is stored as 0.1, not 0.1000000000000000055...
    if isinstance(balance, float):
        return Decimal(repr(balance))
    return balance


def upsert(conn: psycopg.Connection, account_id: str, balance) -> None:
    """Insert accounts(id, balance) or, if the id exists, set its balance.

    Values are passed as query parameters (never formatted into the SQL).
    Transaction handling: `conn.transaction()` commits the upsert when the caller has no transaction
    open (also on a non-autocommit connection), and becomes a savepoint inside the caller's transaction
    when one is already open, leaving the final commit to the caller. Errors propagate (the transaction
    block is rolled back).
    """
    if account_id is None:
        raise ValueError("account_id must not be None (accounts.id is the primary key)")
    with conn.transaction():
        conn.execute(_UPSERT, (account_id, _as_numeric(balance)))
