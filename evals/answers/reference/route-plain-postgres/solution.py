"""Upsert one account balance with psycopg 3."""

UPSERT = ("INSERT INTO accounts (id, balance) VALUES (%s, %s) "
          "ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance")


def upsert(conn, account_id, balance):
    with conn.transaction():
        conn.execute(UPSERT, (account_id, balance))
