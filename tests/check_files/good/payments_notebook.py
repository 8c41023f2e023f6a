# Databricks notebook source
# MAGIC %md
# MAGIC # Large payments to Kafka in real-time mode
# MAGIC Photon must be off for real-time mode; the trigger takes a duration string.

# COMMAND ----------

from pyspark.sql import functions as F

bootstrap = dbutils.secrets.get("kafka", "bootstrap")  # noqa: F821 (notebook global)
accounts = spark.read.table("main.ref.accounts")  # noqa: F821

# COMMAND ----------

raw = (spark.readStream.format("kafka")  # noqa: F821
       .option("kafka.bootstrap.servers", bootstrap)
       .option("subscribe", "payments")
       .load())
payments = raw.select(F.from_json(F.col("value").cast("string"), "id STRING, account STRING, amount DOUBLE").alias("p")).select("p.*")
enriched = payments.join(F.broadcast(accounts), "account")

# COMMAND ----------

out = enriched.where(F.col("amount") > 1000).select(F.col("id").alias("key"), F.to_json(F.struct("*")).alias("value"))
query = (out.writeStream.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("topic", "large-payments")
         .option("checkpointLocation", "/Volumes/main/rt/checkpoints/large")
         .outputMode("update")
         .trigger(realTime="5 seconds")
         .start())
