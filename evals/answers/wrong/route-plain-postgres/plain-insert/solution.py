"""Upsert one account balance with psycopg 3."""

UPSERT = ("INSERT INTO accounts (id, balance) VALUES (%s, %s)")


def upsert(conn, account_id, balance):
    with conn.transaction():
        conn.execute(UPSERT, (account_id, balance))
