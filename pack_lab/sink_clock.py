"""Sink-visible latency: when did Postgres make a row visible, minus when was it sent.

A row is visible to readers when its transaction commits. With
``track_commit_timestamp = on`` Postgres records that moment per transaction
and ``pg_xact_commit_timestamp(xmin)`` returns it; the throwaway server the
pack starts turns it on (:data:`SERVER_SETTINGS`). On a server where it is
off, the table's ``written_ms`` column (``clock_timestamp()`` when the row
was inserted, inside the same transaction, a few ms at most before its
commit) stands in. Either way the clock is the database server's.
"""

from __future__ import annotations

from typing import Any

#: Settings for the pack's throwaway Postgres so commit times are recorded.
SERVER_SETTINGS = {"track_commit_timestamp": "on"}

#: ``written_ms`` column definition: the server clock when the row is inserted.
WRITTEN_MS_COLUMN = ("written_ms bigint NOT NULL "
                     "DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")

#: Commit time of the row's transaction, or ``written_ms`` for a row committed before the setting was on.
COMMIT_SQL = ("COALESCE((extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000)::bigint, "
              "written_ms)")


def visible_clock(conn: Any) -> tuple[str, str]:
    """``(SQL expression, name)`` of the best visibility clock this server offers."""
    setting = conn.execute("SHOW track_commit_timestamp").fetchone()[0]
    if str(setting).lower() in ("on", "true", "1"):
        return COMMIT_SQL, "commit timestamp (track_commit_timestamp)"
    return "written_ms", "insert time (clock_timestamp() inside the writing transaction)"
