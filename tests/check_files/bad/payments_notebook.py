# Databricks notebook source
# MAGIC %md
# MAGIC # Large payments to Kafka in real-time mode
# MAGIC Enable Photon for real-time mode and expect under 800 ms.

# COMMAND ----------

from pyspark.sql import functions as F
from pyspark.sql.functions import udf

accounts = spark.read.table("main.ref.accounts")  # noqa: F821

@udf("string")
def mask(account):
    return account[-4:]

# COMMAND ----------

raw = spark.readStream.format("kafka").option("subscribe", "payments").load()  # noqa: F821
payments = raw.select(F.from_json(F.col("value").cast("string"), "id STRING, account STRING, amount DOUBLE").alias("p")).select("p.*")
enriched = payments.join(accounts, "account")
masked = enriched.select("id", mask("account").alias("acct"))

# COMMAND ----------

interval = "1 second"
query = (masked.writeStream.format("kafka")
         .option("topic", "large-payments")
         .outputMode("append")
         .trigger(realTime=interval)
         .start())
