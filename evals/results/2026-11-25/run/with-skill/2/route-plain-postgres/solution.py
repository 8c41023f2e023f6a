"""Upsert one account balance with psycopg 3 (plain Python, no Spark).

    CREATE TABLE accounts (id text PRIMARY KEY, balance numeric);

One statement, ``INSERT ... ON CONFLICT (id) DO UPDATE``, so the insert-or-update
is atomic: two sessions upserting the same new id cannot both insert, and there
is no read-then-write race. The SQL text is constant; the values travel as
query parameters (never formatted into the string).
"""

from __future__ import annotations

from decimal import Decimal

import psycopg

UPSERT_SQL = (
    "INSERT INTO accounts (id, balance) VALUES (%s, %s) "
    "ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance"
)


def upsert(conn: psycopg.Connection, account_id: str, balance: Decimal | int | float | str | None) -> None:
    """Insert ``account_id`` with ``balance``, or set the balance of the existing row.

    Runs in ``conn.transaction()``: if the caller has no transaction open, the
    upsert is committed when this returns; inside a caller's transaction it is
    a savepoint and the caller decides when to commit. Errors propagate
    (nothing is half written). Pass money as ``Decimal`` (or ``str``) to keep
    ``numeric`` exact; a ``float`` is stored as its binary approximation.
    """
    if account_id is None:
        raise ValueError("account_id must not be None (it is the primary key)")
    if isinstance(balance, str):
        balance = Decimal(balance)
    with conn.transaction():
        conn.execute(UPSERT_SQL, (account_id, balance))
