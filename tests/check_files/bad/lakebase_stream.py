"""A user job: dedup events and write them to Lakebase; several known-wrong shapes."""

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
RT = {"realTime": "1 second"}
SINK = {"endpoint": "proj.main.ep", "dbtable": "public.events", "batchinterval": "100 ms"}


def sink_options(**extra):
    return dict(SINK, **extra)


def build_writer(df):
    w = df.writeStream
    w = w.foreachBatch(lambda b, i: None)
    w = w.outputMode("update")
    return w


def start_pipeline(df, ck):
    writer = build_writer(df)
    writer = writer.trigger(**RT)
    return writer.option("checkpointLocation", ck).start()


def start_lakebase(df, ck):
    opts = sink_options(url="jdbc:postgresql://h/db")
    return (df.writeStream.format("postgresql").outputMode("update")
            .options(**opts)
            .option("checkpointLocation", ck)
            .trigger(realTime="5 minutes").start())


def start_lakebase_without_table(df, ck):
    return (df.writeStream.format("postgresql").outputMode("update")
            .option("endpoint", "proj.main.ep").option("checkpointLocation", ck)
            .trigger(realTime="5 minutes").start())
