"""Insert-or-update one account balance with psycopg 3 (no Spark involved).

`INSERT ... ON CONFLICT (id) DO UPDATE` is atomic in Postgres: two sessions
upserting the same id at once cannot both insert, and there is no
read-then-write race as with a SELECT followed by INSERT or UPDATE.
Values travel as query parameters, never formatted into the SQL text.
"""

from __future__ import annotations

from decimal import Decimal

import psycopg

UPSERT = (
    "INSERT INTO accounts (id, balance) VALUES (%s, %s) "
    "ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance"
)


def upsert(conn: psycopg.Connection, account_id: str, balance: Decimal | int | float | str) -> None:
    """Insert ``(account_id, balance)`` into ``accounts``, or set the balance when the id exists.

    Runs in ``conn.transaction()``: committed on return when the caller has no
    transaction open (also on an autocommit connection), a savepoint inside the
    caller's transaction otherwise; rolled back and re-raised on any error.
    Pass money as ``Decimal`` (or ``str``) to keep ``numeric`` exact; a float is
    accepted but carries binary rounding.
    """
    if account_id is None:
        raise ValueError("account_id must not be None (it is the primary key)")
    with conn.transaction():
        conn.execute(UPSERT, (account_id, balance))
