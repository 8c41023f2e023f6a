"""A job that runs on open-source Spark 4.3 but fails on Databricks (input of the eval task debug-databricks-shuffle).

On Databricks the query is rejected at start with SHUFFLE_MORE_THAN_ONCE (more than one stateful operator /
shuffle in one real-time query).
"""


def unique_counts(events):
    return events.dropDuplicates(["event_id"]).groupBy("user").count()
