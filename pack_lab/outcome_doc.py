"""The outcome table (``rtm_lakebase/sink/outcomes.json``) as the Markdown table the sink reference shows.

Registered as the generated block ``sink-outcomes`` (``scripts/skillcheck/generated.py``):
``skills.py generate`` writes it, ``skills.py validate`` reports it stale when the JSON changes.
"""

from __future__ import annotations

from typing import Any

OUTCOME_WORDS = {"retry": "retry on the same connection", "reconnect": "reconnect and retry",
                 "bad_row": "name the bad row", "permanent": "fail at once"}


def markdown_table(table: dict[str, Any]) -> str:
    lines = ["| # | SQLSTATE or driver signal | when | outcome | why |", "| ---: | --- | --- | --- | --- |"]
    for number, rule in enumerate(table["rules"], 1):
        code = rule.get("sqlstate")
        what = (f"class `{code}`" if len(code) == 2 else f"`{code}`") if code \
            else f"no SQLSTATE: {rule['client'].replace('_', ' ')}"
        if "message" in rule:
            what += " and the text has " + " or ".join(f"\"{m}\"" for m in rule["message"])
        phase = {"any": "any time", "connect": "at login", "write": "on a statement"}[rule["phase"]]
        outcome = OUTCOME_WORDS[rule["outcome"]]
        if rule.get("bounded_by_flush_time"):
            outcome += ", within the flush's own time"
        lines.append(f"| {number} | {what} | {phase} | {outcome} (`{rule['outcome']}`) | {rule['why']} |")
    lines += ["", f"Anything else: {OUTCOME_WORDS[table['default']]} (`{table['default']}`). The first rule that "
              "matches decides."]
    return "\n".join(lines)
