"""Plain psycopg 3 upsert (no Spark involved).

Table: accounts(id text primary key, balance numeric)
"""


UPSERT_SQL = """
INSERT INTO accounts (id, balance)
VALUES (%s, %s)
ON CONFLICT (id) DO UPDATE
SET balance = EXCLUDED.balance
"""


def upsert(conn, account_id, balance):
    """Insert the account or, if the id already exists, replace its balance.

    * One atomic statement (INSERT ... ON CONFLICT DO UPDATE): no read-then-write race.
    * Values are bound as parameters (never formatted into the SQL string).
    * `conn.transaction()` commits when the block exits if the connection was idle, or becomes
      a savepoint when the caller already has a transaction open, so the function works with
      autocommit and non-autocommit connections alike; errors roll back and propagate.
    * Pass `balance` as decimal.Decimal (or int/str) to keep numeric precision; floats are
      accepted but carry binary rounding.
    """
    if account_id is None:
        raise ValueError("account_id must not be None")
    with conn.transaction():
        conn.execute(UPSERT_SQL, (account_id, balance))
