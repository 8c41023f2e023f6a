"""Page someone the moment the Python writer stops writing: ``SinkSettings(on_failure=...)``.

Under stock ``writeStream.foreach`` in real-time mode Spark learns of a flush
that failed for good only when the long batch ends (up to the trigger's
duration); a Python worker has no channel to the driver before its task ends.
The writer logs the error at ERROR at once and calls ``on_failure(message)``
once, on the executor, at the same moment: this example posts it to a chat or
paging webhook. On the fast foreach path and the JVM sink the query itself
fails within seconds, and the hook still runs first.

The message is the writer's error (the table and Postgres' reason, or the row's
key and column), never the password. The hook runs on the flusher thread; what
it raises is logged and ignored, so keep it short (a 5 s timeout here).
"""

from __future__ import annotations

import json
import urllib.request
from functools import partial

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


# --8<-- [start:failed_flush_alert]
def post_alert(webhook_url: str, message: str) -> None:
    """Post ``message`` as Slack-style JSON to ``webhook_url``; runs on the executor."""
    body = json.dumps({"text": f"Lakebase sink stopped writing: {message}"}).encode()
    request = urllib.request.Request(webhook_url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5):
        pass


def alerting_writer(dsn: str, table: str, webhook_url: str) -> PostgresForeachWriter:
    """The upsert writer, posting to ``webhook_url`` the moment a flush fails for good."""
    return PostgresForeachWriter(dsn, SinkSettings(table=table, on_failure=partial(post_alert, webhook_url)))
# --8<-- [end:failed_flush_alert]
