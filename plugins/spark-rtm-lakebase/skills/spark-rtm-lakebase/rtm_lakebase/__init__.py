"""The pack's user package for Spark Structured Streaming into Lakebase/Postgres, one folder per job.

- :mod:`rtm_lakebase.sink` - the Python ``foreach`` writer (``PostgresForeachWriter``, ``SinkSettings``);
- :mod:`rtm_lakebase.postgres` - connection settings, TLS, Lakebase OAuth (``ConnectionSettings``, ``lakebase_token``);
- :mod:`rtm_lakebase.jvm` - the JVM sink for real-time mode, driven from Python (``start_jvm_sink_query``);
- :mod:`rtm_lakebase.calc` - sizing and connection-budget calculators (pure Python);
- :mod:`rtm_lakebase.check` - the checker for your own files.

The pipelines a user copies (stateful patterns, Kafka patterns, ad attribution) are in ``examples/``.
"""
