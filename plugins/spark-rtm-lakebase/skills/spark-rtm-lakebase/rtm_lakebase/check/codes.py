"""Every code the checker reports: a stable code, why it is wrong, and what to write instead.

``python3 -m rtm_lakebase.check --codes`` prints them. A code marked not
suppressible cannot be silenced by an opt-out comment (see
:mod:`rtm_lakebase.check.optouts`): syntax errors and unreadable files. The
pack's validator (``scripts/skills.py rules``) uses these same entries, plus
its own codes about the pack's structure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    code: str
    summary: str
    fix: str
    suppressible: bool = False


_ALL = [
    Code("PACK002", "a pack file cannot be read or is not UTF-8", "Make the file readable and save it as UTF-8."),
    Code("PACK003", "a pack path is not a regular file inside the pack (FIFO, device, socket, directory, broken "
         "symlink or symlink leaving the pack); it is never opened", "Replace it with a regular file, or remove it."),
    Code("PACK004", "a pack file is over one of the validator's size limits (bytes; headings for anchors)",
         "Split the file; references and modules stay far below the limits (see the limits line below)."),
    Code("PACK005", "more findings in one file than the per-file limit; the rest are counted, not listed",
         "Fix the listed findings and validate again."),
    Code("PY001", "python block or example module does not parse", "Make the code valid Python; show pseudo-code in a ```text block."),
    Code("PY002", "python block or module nested too deeply for the parser or the rules (not checked)",
         "Flatten the code: name intermediate results instead of nesting expressions hundreds deep."),
    Code("OPT001", "opt-out comment without a reason", "Write <!-- skills: allow CODE -- why this block is wrong on purpose -->."),
    Code("OPT002", "opt-out suppresses nothing (stale)", "Remove the code from the opt-out, or the opt-out itself."),
    Code("OPT003", "opt-out names an unknown or unsuppressible code", "Use a code listed by `python scripts/skills.py rules`."),
    Code("RTM001", "realTime trigger given a non-string (e.g. realTime=True)",
         "Pass a duration string: .trigger(realTime=\"5 seconds\").", True),
    Code("RTM002", "realTime trigger duration under 5 seconds or not a Spark interval",
         "Use at least \"5 seconds\" (Spark's minimum); it is the checkpoint interval, not a latency.", True),
    Code("RTM003", "foreachBatch in a real-time query (rejected at start())",
         "Use .foreach(writer) with an idempotent writer.", True),
    Code("RTM004", "real-time query with an output mode other than update (or none: the default is append)",
         "Add .outputMode(\"update\").", True),
    Code("RTM005", "dropDuplicatesWithinWatermark in a real-time query (not allowlisted)",
         "Use dropDuplicates(keys) (state is unbounded) or deduplicate in the sink.", True),
    Code("RTM006", "Python or pandas UDF in a real-time query (not allowlisted in OSS)",
         "Use built-in functions (pyspark.sql.functions) or move the logic into the foreach writer.", True),
    Code("RTM007", "mapInPandas/mapInArrow in a real-time query (not supported)",
         "Use built-in column expressions, or do the work in the foreach writer.", True),
    Code("RTM008", "session window in a real-time query (not supported)", "Use tumbling or sliding windows (window()).", True),
    Code("RTM009", "non-broadcast join in a real-time query (only broadcast stream-static joins run)",
         "Wrap the static side: stream.join(broadcast(static_df), key).", True),
    Code("LBS001", "Lakebase sink option outside the documented set (JDBC_STREAMING_SINK_INVALID_OPTIONS)",
         "Use endpoint, database, dbtable, upsertkey, batchsize, batchinterval, checkpointLocation.", True),
    Code("LBS002", "Lakebase sink written by endpoint without endpoint or dbtable",
         "Set .option(\"endpoint\", ...) and .option(\"dbtable\", \"schema.table\"), or use .toTable(\"catalog.schema.table\").", True),
    Code("LBS003", "Lakebase sink batchinterval not a Spark interval (e.g. \"100 ms\")",
         "Spell the unit out: \"100 milliseconds\".", True),
    Code("SINK001", "foreach writer's open() returns a falsy value on an exception (rows silently skipped)",
         "Let the exception propagate (raise) so the task fails and the rows are replayed.", True),
    Code("SQL001", "SQL built with an f-string, % or .format() passed to execute/executemany/copy",
         "Use query parameters (%s placeholders + a tuple) or psycopg.sql.SQL(...).format(sql.Identifier(...)).", True),
    Code("CONT001", "comment next to a line-continuation backslash (a syntax error or a silent break)",
         "Wrap the chain in parentheses and put comments on their own lines.", True),
    Code("PROSE001", "claims Photon is needed or enabled for real-time mode",
         "Say Photon must be off for real-time mode on Databricks.", True),
    Code("PROSE002", "claims Databricks Runtime 13.3 for real-time mode", "Real-time mode needs Databricks Runtime 16.4 LTS or later.", True),
    Code("PROSE003", "claims an 800 ms latency figure", "Quote measured figures with their source instead.", True),
    Code("PROSE004", "realTime=True written in text", "Write realTime=\"5 seconds\" (a duration string).", True),
]

CODES: dict[str, Code] = {c.code: c for c in _ALL}

if len(CODES) != len(_ALL):  # pragma: no cover - guards the table itself
    raise RuntimeError("duplicate finding code in the registry")
