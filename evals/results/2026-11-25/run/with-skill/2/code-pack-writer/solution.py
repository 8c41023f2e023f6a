"""EventsWriter(dsn, table): the pack's hardened foreach writer, configured for (id, version, payload).

    CREATE TABLE events (id text PRIMARY KEY, version bigint, payload text);

This does not implement a writer: it returns ``rtm_lakebase.sink.PostgresForeachWriter``
(the skill's package) set up as a version-guarded upsert:

- ``mode="upsert"`` on ``key_columns=("id",)``: one
  ``INSERT ... SELECT FROM unnest(...) ON CONFLICT (id) DO UPDATE`` per flush;
- ``version_column="version"``: a stored row is replaced only by a strictly
  newer version, so replayed epochs and late older versions never win; inside
  one buffer the higher version is kept too;
- identifiers quoted with ``psycopg.sql.Identifier``, values bound as
  parameters and checked per column before sending: hostile values are
  stored verbatim or refused with ``BadRowError`` naming the key and column
  (nothing of that flush is written, the query fails: no silent loss);
- lost connections (Postgres restart, network drop) are reconnected and the
  flush retried with bounded, jittered backoff (``max_retries``); an
  unreachable server makes ``open()`` RAISE ``SinkConnectionError`` after the
  retries -- it never returns False (which would drop the partition's rows);
- flushes every ``max_batch_rows`` keys or when the oldest row is
  ``max_dwell_ms`` old, from its own thread, so real-time mode (where
  ``close()`` comes once per long batch) does not hold rows back; an error in
  that thread is raised by the next ``process()`` or by ``close()``.

Executors must be able to import ``rtm_lakebase`` (and ``psycopg``): install the
pack's wheel on the cluster, or ship it with
``spark.sparkContext.addPyFile("rtm_lakebase.zip")`` (built with
``python -m zipfile -c rtm_lakebase.zip rtm_lakebase/`` from the skill's folder).

Usage::

    writer = EventsWriter(dsn, "events")
    query = (events.select("id", "version", "payload").writeStream.foreach(writer)
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")      # checkpoint interval, not latency
             .start())
"""

from __future__ import annotations

from rtm_lakebase.postgres import ConnectionSettings
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def EventsWriter(dsn: str | ConnectionSettings, table: str, *, max_batch_rows: int = 1000,
                 max_dwell_ms: int = 100, max_retries: int = 6) -> PostgresForeachWriter:
    """The pack's ``PostgresForeachWriter``: upsert on ``id``, newest ``version`` wins.

    ``dsn``: a libpq DSN/URL or ``ConnectionSettings`` (take the password from a
    secret store, or use ``ConnectionSettings(password_provider=...)`` for
    Lakebase OAuth tokens). ``table``: ``"events"`` or ``"schema.events"``.
    """
    return PostgresForeachWriter(
        dsn,
        SinkSettings(
            table=table,
            mode="upsert",
            key_columns=("id",),
            columns=("id", "version", "payload"),
            version_column="version",
            max_batch_rows=max_batch_rows,
            max_dwell_ms=max_dwell_ms,
            max_retries=max_retries,
        ),
    )
