"""Idempotent, version-guarded upsert of (id, version, payload) rows through the pack's
hardened Python foreach writer, ``rtm_lakebase.sink.PostgresForeachWriter``.

What the pack's writer guarantees (see references/lakebase-sink-python.md):
- replays / late older versions: ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE
  version is strictly newer``; rows are deduplicated per key in the buffer (higher version
  wins) and written sorted by key;
- hostile values and identifiers: values are bound as parameters (unnest arrays), identifiers
  quoted with psycopg.sql; a row the table rejects raises ``BadRowError`` naming key and
  column, and nothing of its flush is written (no silent loss);
- Postgres restart / lost connection: bounded, jittered reconnect-and-retry of the flush
  (``max_retries``); when retries run out the error is raised and the task fails;
- unreachable server: ``open()`` retries and then raises ``SinkConnectionError`` - it never
  returns False (which would make Spark drop the partition's rows silently);
- real-time mode: a flusher thread writes full buffers and buffers older than
  ``max_dwell_ms``, so rows are committed long before ``close()``.

Use::

    writer = EventsWriter(dsn, "events")
    (df.select("id", "version", "payload").writeStream.foreach(writer)
       .outputMode("update").option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes").start())
"""

from __future__ import annotations

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def EventsWriter(dsn, table: str) -> PostgresForeachWriter:  # noqa: N802 (interface name)
    """The pack's foreach writer, upserting (id, version, payload) with newest-version-wins.

    ``dsn``: libpq DSN/URL string or ``rtm_lakebase.postgres.ConnectionSettings``.
    ``table``: the table name as SQL reads it ("events", "app.events", '"Weird"."Name"').
    """
    return PostgresForeachWriter(
        dsn,
        SinkSettings(
            table=table,
            mode="upsert",
            key_columns=("id",),
            columns=("id", "version", "payload"),
            version_column="version",     # only a strictly newer version replaces a row
            max_batch_rows=1000,
            max_dwell_ms=100,             # flush the tail within 100 ms, not at close()
            max_retries=6,                # reconnect + retry a flush on lost connections
        ),
    )
