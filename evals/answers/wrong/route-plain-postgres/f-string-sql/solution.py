"""Upsert with SQL built from an f-string (injectable)."""


def upsert(conn, account_id, balance):
    with conn.transaction():
        conn.execute(f"INSERT INTO accounts (id, balance) VALUES ('{account_id}', {balance}) "
                     "ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance")
