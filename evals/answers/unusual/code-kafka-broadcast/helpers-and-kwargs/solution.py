"""Broadcast through a hint, the writer's settings from a dict, a helper that builds the JSON value."""

from pyspark.sql import DataFrame, functions as F

KAFKA = {"topic": None, "checkpointLocation": None}
RT = {"realTime": "30 seconds"}


def _as_record(df: DataFrame) -> DataFrame:
    cols = ["id", "account", "amount", "owner"]
    return df.select(df["id"].alias("key"), F.to_json(F.struct(*cols)).alias("value"))


def enrich(events: DataFrame, accounts: DataFrame) -> DataFrame:
    small = accounts.hint("broadcast")
    big_ones = events.filter("amount > 1000")
    return _as_record(big_ones.join(small, on="account", how="inner"))


def start(events, accounts, bootstrap, topic, checkpoint):
    opts = dict(KAFKA, topic=topic, checkpointLocation=checkpoint)
    opts["kafka.bootstrap.servers"] = bootstrap
    writer = enrich(events, accounts).writeStream.format("kafka").options(**opts)
    return writer.outputMode("update").trigger(**RT).start()
