"""Renamed, still one query: the counts deduplicate again."""


def databricks_dedup(events):
    return events.dropDuplicates(["event_id"])


def databricks_counts(deduped):
    return deduped.dropDuplicates(["event_id"]).groupBy("user").count()
