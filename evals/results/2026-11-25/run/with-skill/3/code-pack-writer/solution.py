"""Upsert (id, version, payload) into Postgres with the pack's hardened Python foreach writer.

``EventsWriter(dsn, table)`` returns the skill package's
``rtm_lakebase.sink.PostgresForeachWriter`` configured for this table; no
writer code of our own. What the pack's writer does for us (each behaviour is
tested by the pack against a real Postgres):

- **newest version wins**: upsert ``INSERT … ON CONFLICT (id) DO UPDATE … WHERE
  t.version IS NULL OR t.version < EXCLUDED.version`` (one statement per flush,
  from per-column arrays), so replayed epochs and late older versions are
  skipped (counted as stale) and out-of-order rows in one buffer keep the
  higher version;
- **hostile values**: identifiers quoted with ``psycopg.sql``, values sent as
  parameters; values a column cannot hold without a silent change (NUL in text,
  wrong types, out of range, …) raise ``BadRowError`` naming the key and
  column, and nothing of that flush is written;
- **Postgres restart / lost connection / deadlock**: reconnect and retry the
  flush with bounded, jittered backoff (6 retries by default);
- **unreachable server**: ``open()`` retries, then raises
  ``SinkConnectionError`` (it never returns False, which would drop the
  partition's rows silently); ``connect_timeout`` is always set;
- **no error swallowed**: a flush failure in the writer's flusher thread is
  logged at ERROR at once and raised by the next ``process()`` or ``close()``;
- **real-time mode**: flushes every ``max_batch_rows`` distinct keys or when the
  oldest buffered row is ``max_dwell_ms`` old, from its own thread, not only in
  ``close()`` (which runs once per long batch).

Executors must be able to import ``rtm_lakebase`` (the writer is pickled by
module name): install the pack's wheel on the cluster, or call
:func:`ship_package` once on the driver (zips the installed package and adds it
with ``addPyFile``). The executors also need ``psycopg``.

TLS: the writer defaults to ``sslmode=require`` for any host that is not a Unix
socket or a numeric loopback address; set ``sslmode`` in the DSN to override.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

try:
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
except ImportError:  # the skill is installed but not on sys.path: use its installed folder
    _SKILL = Path(os.environ.get("RTM_LAKEBASE_SKILL", "/work/evalrun/run/skill/spark-rtm-lakebase"))
    if (_SKILL / "rtm_lakebase").is_dir() and str(_SKILL) not in sys.path:
        sys.path.insert(0, str(_SKILL))
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def EventsWriter(dsn: str, table: str, *, max_batch_rows: int = 1000,
                 max_dwell_ms: int = 100) -> PostgresForeachWriter:
    """The pack's foreach writer upserting (id, version, payload) into ``table``; the newest version wins.

    ``table`` is read as SQL reads a name: ``"events"``, ``"sales.events"`` or a
    double-quoted exact name. ``max_dwell_ms`` bounds how long a row waits in
    the writer when traffic is thin (lower it for lower latency).
    """
    return PostgresForeachWriter(
        dsn,
        SinkSettings(
            table=table,
            mode="upsert",
            key_columns=("id",),          # the table's primary key
            columns=("id", "version", "payload"),
            version_column="version",     # only a strictly newer version replaces a row
            max_batch_rows=max_batch_rows,
            max_dwell_ms=max_dwell_ms,
        ),
    )


def ship_package(spark) -> str:
    """Zip the installed ``rtm_lakebase`` package and add it to the executors' Python path."""
    import rtm_lakebase

    package = Path(rtm_lakebase.__file__).resolve().parent
    target = Path(tempfile.mkdtemp(prefix="rtm_lakebase_")) / "rtm_lakebase.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in package.rglob("*.py"):
            zf.write(path, path.relative_to(package.parent))
    spark.sparkContext.addPyFile(str(target))
    return str(target)
