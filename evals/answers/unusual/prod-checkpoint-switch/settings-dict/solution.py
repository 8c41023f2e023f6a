"""Settings kept in one dict; the count is the DataFrame count() shortcut."""

SETTINGS = {"spark.sql.streaming.stateStore.checkpointFormatVersion": 2}


def configure(spark):
    for key, value in SETTINGS.items():
        spark.conf.set(key, str(value))


def counts(events):
    per_key = events.groupBy("k")
    return per_key.count()
