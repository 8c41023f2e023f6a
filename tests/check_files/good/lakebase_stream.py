"""A user job: dedup events and write them to Lakebase; the corrected version."""

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
RT = {"realTime": "1 minute"}
SINK = {"endpoint": "proj.main.ep", "dbtable": "public.events", "batchinterval": "100 milliseconds"}


def sink_options(**extra):
    return dict(SINK, **extra)


def build_writer(df, writer):
    w = df.writeStream
    w = w.foreach(writer)
    w = w.outputMode("update")
    return w


def start_pipeline(df, writer, ck):
    w = build_writer(df, writer)
    w = w.trigger(**RT)
    return w.option("checkpointLocation", ck).start()


def start_lakebase(df, ck):
    opts = sink_options(upsertkey="event_id")
    return (df.writeStream.format("postgresql").outputMode("update")
            .options(**opts)
            .option("checkpointLocation", ck)
            .trigger(realTime="5 minutes").start())


def start_lakebase_uc(df, ck):
    return (df.writeStream.outputMode("update").option("checkpointLocation", ck)
            .trigger(realTime="5 minutes").toTable("main.app.events"))
