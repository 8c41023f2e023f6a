"""The pack's user package: Postgres/Lakebase writers for Spark Structured Streaming, pipelines, Kafka patterns and sizing calculators."""
