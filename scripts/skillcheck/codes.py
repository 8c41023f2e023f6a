"""Registry of every finding code: a stable code, why it is wrong, and what to write instead.

``python scripts/skills.py rules`` prints this table. A code marked not
suppressible cannot be silenced by a ``<!-- skills: allow CODE -- reason -->``
opt-out (syntax errors and the checks on the pack's own structure).
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
    # Pack structure and bad input
    Code("PACK001", "SKILL.md is missing at the pack root", "Create SKILL.md with front matter and a routing table."),
    Code("PACK002", "a pack file cannot be read or is not UTF-8", "Make the file readable and save it as UTF-8."),
    Code("PACK003", "a pack path is not a regular file inside the pack (FIFO, device, socket, directory, broken "
         "symlink or symlink leaving the pack); it is never opened", "Replace it with a regular file, or remove it."),
    Code("PACK004", "a pack file is over one of the validator's size limits (bytes; headings for anchors)",
         "Split the file; references and modules stay far below the limits (see the limits line below)."),
    Code("PACK005", "more findings in one file than the per-file limit; the rest are counted, not listed",
         "Fix the listed findings and validate again."),
    # SKILL.md front matter (Agent Skills specification)
    Code("FM001", "SKILL.md front matter is missing or is not a YAML mapping", "Start SKILL.md with '---', YAML keys, '---'."),
    Code("FM002", "front matter key not allowed by the Agent Skills specification",
         "Use only name, description, license, compatibility, metadata, allowed-tools; put the rest under metadata."),
    Code("FM003", "skill name breaks the naming rule",
         "Use 1-64 chars of a-z, 0-9 and '-', no leading, trailing or double hyphen."),
    Code("FM004", "skill name differs from the install folder name",
         "Set name equal to [tool.skill] install-name in pyproject.toml."),
    Code("FM005", "description missing, longer than 1024 chars or containing '<' or '>'",
         "Write a plain 1-1024 char description without angle brackets."),
    Code("FM006", "SKILL.md body is 500 lines or longer", "Move detail into references/ and link it from the routing table."),
    Code("FM007", "optional front matter field has the wrong type or length",
         "license/compatibility (max 500 chars)/allowed-tools are strings; metadata maps strings to strings."),
    # Routing table
    Code("ROUTE001", "SKILL.md has no routing table, or a reference is not listed in it",
         "Add a table row linking references/FILE.md with a 'Read when' cell."),
    Code("ROUTE002", "reference nested more than one level deep", "Keep references directly in references/ (references/FILE.md)."),
    # Manifest
    Code("MAN001", "manifest.json is missing", "Run `python scripts/skills.py generate`."),
    Code("MAN002", "manifest.json is not valid JSON", "Regenerate it with `python scripts/skills.py generate`; never edit it."),
    Code("MAN003", "manifest.json breaks schemas/manifest.schema.json", "Regenerate it; fix the generator or schema if they disagree."),
    Code("MAN004", "manifest.json differs from what generate would write (drift)", "Run `python scripts/skills.py generate` and commit."),
    Code("MAN005", "the manifest JSON Schema is missing or not a valid draft 2020-12 schema",
         "Restore schemas/manifest.schema.json and check it with Draft202012Validator.check_schema."),
    # Markdown structure
    # (FENCE001/REF001 were MD001/MD002 until they clashed with markdownlint's rule IDs.)
    Code("FENCE001", "fenced code block without a language tag", "Tag every fence: ```python, ```text, ```bash, ```sql ..."),
    Code("FENCE002", "code fence never closed (it swallows the rest of the file or list item)",
         "Close the fence with the same marker (``` or ~~~), at least as long as the opening one."),
    Code("HTML001", "HTML comment never closed (the rest of the page disappears from the site)",
         "Close the comment with '-->', or write '<!--' inside a code span."),
    Code("REF001", "reference does not start with '# Title' on line 1 followed by a summary paragraph",
         "Put the H1 on line 1, a blank line, then a one-paragraph summary."),
    Code("LINK001", "relative link target does not exist", "Fix the path (relative to the Markdown file) or remove the link."),
    Code("LINK002", "link anchor matches no heading id as the site renders it (Python-Markdown toc, mkdocs.yml settings)",
         "Use the heading's id: lowercase, spaces to '-', punctuation dropped; a repeated heading gets _1, _2 ..."),
    # Code blocks
    Code("PY001", "python block or example module does not parse", "Make the code valid Python; show pseudo-code in a ```text block."),
    Code("PY002", "python block or module nested too deeply for the parser or the rules (not checked)",
         "Flatten the code: name intermediate results instead of nesting expressions hundreds deep."),
    Code("EX001", "example module has no docstring", "Start the module with a docstring whose first line summarises it."),
    Code("OPT001", "opt-out comment without a reason", "Write <!-- skills: allow CODE -- why this block is wrong on purpose -->."),
    Code("OPT002", "opt-out suppresses nothing (stale)", "Remove the code from the opt-out, or the opt-out itself."),
    Code("OPT003", "opt-out names an unknown or unsuppressible code", "Use a code listed by `python scripts/skills.py rules`."),
    Code("EXC001", "excerpt names a module that does not exist", "Point <!-- excerpt: examples/MODULE.py#NAME --> at a real module."),
    Code("EXC002", "excerpt region missing or unbalanced in the module",
         "Mark the region with '# --8<-- [start:NAME]' and '# --8<-- [end:NAME]'."),
    Code("EXC003", "fenced block differs from the module region it excerpts", "Copy the region exactly (dedented), or fix the markers."),
    Code("EXC004", "excerpt comment is not directly followed by a fenced block", "Put the fence on the line after the excerpt comment."),
    # Generated blocks (one mechanism: `skills.py generate` writes them, validate checks them)
    Code("GEN001", "generated block differs from what its generator renders from its JSON (stale)",
         "Run `python scripts/skills.py generate` and commit; never edit inside the markers."),
    Code("GEN002", "generated block markers broken: unknown generator, start without end, end without start, "
         "or mismatched names", "Use <!-- generated:NAME --> ... <!-- /generated:NAME --> with a registered NAME."),
    Code("GEN003", "a generator cannot run: its JSON source is missing or invalid, or its function fails",
         "Restore the JSON source (re-run the script that writes it) or fix the generator function."),
    # Real-time mode rules (Python AST)
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
    # Databricks' native Lakebase streaming sink (format("postgresql"))
    Code("LBS001", "Lakebase sink option outside the documented set (JDBC_STREAMING_SINK_INVALID_OPTIONS)",
         "Use endpoint, database, dbtable, upsertkey, batchsize, batchinterval, checkpointLocation.", True),
    Code("LBS002", "Lakebase sink written by endpoint without endpoint or dbtable",
         "Set .option(\"endpoint\", ...) and .option(\"dbtable\", \"schema.table\"), or use .toTable(\"catalog.schema.table\").", True),
    Code("LBS003", "Lakebase sink batchinterval not a Spark interval (e.g. \"100 ms\")",
         "Spell the unit out: \"100 milliseconds\".", True),
    # Sink, SQL, syntax
    Code("SINK001", "foreach writer's open() returns a falsy value on an exception (rows silently skipped)",
         "Let the exception propagate (raise) so the task fails and the rows are replayed.", True),
    Code("SQL001", "SQL built with an f-string, % or .format() passed to execute/executemany/copy",
         "Use query parameters (%s placeholders + a tuple) or psycopg.sql.SQL(...).format(sql.Identifier(...)).", True),
    Code("CONT001", "comment next to a line-continuation backslash (a syntax error or a silent break)",
         "Wrap the chain in parentheses and put comments on their own lines.", True),
    # Prose rules
    Code("PROSE001", "claims Photon is needed or enabled for real-time mode",
         "Say Photon must be off for real-time mode on Databricks.", True),
    Code("PROSE002", "claims Databricks Runtime 13.3 for real-time mode", "Real-time mode needs Databricks Runtime 16.4 LTS or later.", True),
    Code("PROSE003", "claims an 800 ms latency figure", "Quote measured figures with their source instead.", True),
    Code("PROSE004", "realTime=True written in text", "Write realTime=\"5 seconds\" (a duration string).", True),
    # Example modules import cleanly
    Code("IMP001", "importing an example module prints output", "Move output behind a function or `if __name__ == \"__main__\":`."),
    Code("IMP002", "importing an example module starts a thread", "Start threads inside functions, not at import."),
    Code("IMP003", "importing an example module starts a SparkSession/JVM", "Create sessions inside functions, not at import."),
    Code("IMP004", "importing an example module raises (or hangs)", "Make the module import cleanly with the pinned dependencies."),
    # Plugin/marketplace manifests and the installed package (plugin_manifests.py, package.py)
    Code("PLUG001", "a plugin or marketplace manifest (or its schema) is unreadable or not valid JSON/YAML",
         "Fix the syntax; the schemas live in schemas/ (see `python scripts/skills.py rules`)."),
    Code("PLUG002", "a plugin or marketplace manifest breaks its schema in schemas/",
         "Use the fields the tool's published reference names (each schema's $comment cites it)."),
    Code("PLUG003", "a manifest names the plugin or skill differently from SKILL.md's name",
         "Use SKILL.md's front matter name in every plugin.json, marketplace entry and default_prompt."),
    Code("PLUG004", "a manifest's version differs from [project] version in pyproject.toml",
         "Set the same version in pyproject.toml and every plugin.json/marketplace entry."),
    Code("PLUG005", "a path a manifest names does not exist, leaves the pack, or lacks what the tool needs",
         "Point skills at a folder holding SKILL.md and marketplace sources at a folder holding the plugin manifest."),
    Code("PLUG006", "a skills path holds more than one SKILL.md (the tool would load each one)",
         "Keep exactly one SKILL.md under the plugin's skills path."),
    Code("PKG001", "a link in the installed skill (dist/<install-name>/) does not resolve inside it",
         "Link only to SKILL.md, references/, rtm_lakebase/, examples/; other files are rewritten to repository URLs."),
    Code("PKG002", "the installed skill cannot be built (e.g. a link leaves it and no repository URL is set)",
         "Set [project.urls] Repository in pyproject.toml, or link only to files the package holds."),
    # External tools
    Code("EXT001", "markdownlint reports a problem", "Fix the Markdown as the rule says (config: .markdownlint.yaml)."),
    Code("EXT002", "mkdocs build --strict fails or warns", "Fix the page, link or nav entry mkdocs names."),
    Code("EXT003", "an external checker is not installed", "Run `bash scripts/setup.sh` (npm ci for markdownlint, pip for mkdocs)."),
]

CODES: dict[str, Code] = {c.code: c for c in _ALL}

if len(CODES) != len(_ALL):  # pragma: no cover - guards the table itself
    raise RuntimeError("duplicate finding code in the registry")


def describe(code: str) -> str:
    return CODES[code].summary


def rules_table() -> str:
    """Plain-text table: code, summary, fix (one code per line), then the validator's limits."""
    from .limits import describe

    width = max(len(c) for c in CODES)
    lines = [f"{'CODE':<{width}}  SUMMARY -- FIX"]
    for c in _ALL:
        opt = "" if c.suppressible else " [not suppressible]"
        lines.append(f"{c.code:<{width}}  {c.summary} -- {c.fix}{opt}")
    lines += ["", describe()]
    return "\n".join(lines)
