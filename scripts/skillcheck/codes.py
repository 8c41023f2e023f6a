"""Registry of every finding code: a stable code, why it is wrong, and what to write instead.

``python scripts/skills.py rules`` prints this table. A code marked not
suppressible cannot be silenced by a ``<!-- skills: allow CODE -- reason -->``
opt-out (syntax errors and the checks on the pack's own structure).

The codes a user's own files can get (real-time, sink, SQL, continuation,
prose, syntax, opt-outs, unreadable files) are defined once, in
:mod:`rtm_lakebase.check.codes`, which ships with the skill; this table adds
the pack's own codes around them.
"""

from __future__ import annotations

from rtm_lakebase.check.codes import CODES as USER_CODES
from rtm_lakebase.check.codes import Code

_ALL = [
    # Pack structure and bad input
    Code("PACK001", "SKILL.md is missing at the pack root", "Create SKILL.md with front matter and a routing table."),
    USER_CODES["PACK002"],
    USER_CODES["PACK003"],
    USER_CODES["PACK004"],
    USER_CODES["PACK005"],
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
    USER_CODES["PY001"],
    USER_CODES["PY002"],
    Code("EX001", "example module has no docstring", "Start the module with a docstring whose first line summarises it."),
    USER_CODES["OPT001"],
    USER_CODES["OPT002"],
    USER_CODES["OPT003"],
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
    # Figures in prose, rendered from their result files (figures.py)
    Code("FIG001", "a figure in prose differs from the result file its marker names (stale)",
         "Run `python scripts/skills.py generate` (it rewrites every marked number from its file) and commit."),
    Code("FIG002", "a figure marker cannot be rendered: its file is missing or not JSON, its pointer matches "
         "nothing (or several elements), names no number, its format is bad, or no number follows it",
         "Write <!-- fig: FILE.json#/json/pointer[field=value]/key [/N][:spec] -->NUMBER with a real file and path."),
    # Real-time mode rules (Python AST)
    USER_CODES["RTM001"],
    USER_CODES["RTM002"],
    USER_CODES["RTM003"],
    USER_CODES["RTM004"],
    USER_CODES["RTM005"],
    USER_CODES["RTM006"],
    USER_CODES["RTM007"],
    USER_CODES["RTM008"],
    USER_CODES["RTM009"],
    USER_CODES["LBS001"],
    USER_CODES["LBS002"],
    USER_CODES["LBS003"],
    # Sink, SQL, syntax
    USER_CODES["SINK001"],
    USER_CODES["SQL001"],
    USER_CODES["CONT001"],
    # Prose rules
    USER_CODES["PROSE001"],
    USER_CODES["PROSE002"],
    USER_CODES["PROSE003"],
    USER_CODES["PROSE004"],
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
    Code("PLUG007", "the plugin folder plugins/<install-name>/ is missing or differs from what package writes (drift)",
         "Run `python scripts/skills.py package` and commit; never edit the plugin folder by hand."),
    Code("PLUG008", "a Codex or Cursor skills path is the plugin root ('./'): Codex ignores it (no skill loads), "
         "Cursor's validator refuses it", "Put the skill in skills/<name>/ and set \"skills\": \"./skills/\"."),
    Code("PLUG009", "a marketplace's plugin folder holds more than the plugin (package.json, agents/, tests ...): "
         "clients copy it all and read package.json, agents/, commands/, hooks/ as plugin parts",
         "Point the marketplace at the generated plugins/<install-name>/ (manifests and skills/ only)."),
    Code("PLUG010", "agents/openai.yaml's short_description differs from [tool.skill.plugin] short-description: "
         "Codex shows one on the skill card and the other on the plugin card",
         "Write the same text in both (pyproject.toml's is the plugin manifests' source)."),
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
