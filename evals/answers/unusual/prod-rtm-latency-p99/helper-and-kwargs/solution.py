"""The JVM sink started from a helper, its settings in a dict."""

from rtm_lakebase.jvm import start_jvm_sink_query

SINK = {"upsertkey": "id", "batchsize": 500, "trigger": {"realTime": "1 minute"}}


def _sink(df, **kwargs):
    return start_jvm_sink_query(df, **kwargs, **SINK)


def start(df, dsn, table, checkpoint):
    query = _sink(df.select("id", "sent_ms", "payload"), dsn=dsn, table=table, checkpoint_location=checkpoint)
    return query
