"""Upsert through Spark's JDBC writer (Spark where none was asked for)."""

from pyspark.sql import SparkSession


def upsert(conn, account_id, balance):
    spark = SparkSession.builder.getOrCreate()
    spark.createDataFrame([(account_id, balance)], "id STRING, balance DOUBLE").write.jdbc("jdbc:postgresql:db", "accounts")
