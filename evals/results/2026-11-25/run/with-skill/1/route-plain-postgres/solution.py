"""Insert-or-update an account balance with psycopg 3 (plain Python, no Spark)."""

from __future__ import annotations

from decimal import Decimal

import psycopg

UPSERT = """
    INSERT INTO accounts (id, balance)
    VALUES (%s, %s)
    ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance
"""


def upsert(conn: psycopg.Connection, account_id: str, balance: Decimal | int | float | str) -> None:
    """Insert ``(account_id, balance)`` into ``accounts`` or update the balance if the id exists.

    Values are bound as parameters (never formatted into the SQL). ``conn.transaction()``
    commits when it opened the transaction itself, or uses a savepoint inside a caller's
    transaction, so the call is atomic either way. Pass ``Decimal`` for exact money values.
    """
    if isinstance(balance, float):
        balance = Decimal(str(balance))  # avoid binary-float artefacts in a numeric column
    with conn.transaction():
        conn.execute(UPSERT, (account_id, balance))
