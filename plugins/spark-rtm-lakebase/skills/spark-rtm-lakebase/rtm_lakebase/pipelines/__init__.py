"""Streaming pipelines for real-time mode: transformations, Kafka patterns, ad attribution.

:mod:`~rtm_lakebase.pipelines.real_time` (dedup, windows, stateful totals, and
``start_real_time`` / ``start_micro_batch`` into a ``foreach`` writer),
:mod:`~rtm_lakebase.pipelines.kafka` (Kafka source/sink patterns and options) and
:mod:`~rtm_lakebase.pipelines.attribution` (requests matched with acks, with a timeout).
"""

from rtm_lakebase.pipelines.attribution import AttributionProcessor, attribute, attribution_writer
from rtm_lakebase.pipelines.kafka import (
    enrich_with_accounts,
    kafka_sink_options,
    kafka_source_options,
    large_payments,
    make_batch_router,
    parse_payments,
    route_by_topic,
    sasl_ssl_settings,
    to_kafka_record,
    validate_payments,
)
from rtm_lakebase.pipelines.real_time import (
    PIPELINES,
    dedup_events,
    dedup_events_bounded,
    device_totals_aggregate,
    device_totals_stateful,
    start_micro_batch,
    start_real_time,
    windowed_device_stats,
    with_ingest_time,
)

__all__ = ["PIPELINES", "AttributionProcessor", "attribute", "attribution_writer", "dedup_events",
           "dedup_events_bounded", "device_totals_aggregate", "device_totals_stateful", "enrich_with_accounts",
           "kafka_sink_options", "kafka_source_options", "large_payments", "make_batch_router", "parse_payments",
           "route_by_topic", "sasl_ssl_settings", "start_micro_batch", "start_real_time", "to_kafka_record",
           "validate_payments", "windowed_device_stats", "with_ingest_time"]
