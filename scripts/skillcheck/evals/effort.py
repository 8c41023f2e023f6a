"""Effort of one assistant job: wall time, tool calls, turns and tokens, from what its client prints.

``eval run --agent`` times each job and keeps the client's standard output; where that output is one of the
machine-readable formats below, the tool calls, turns and tokens come from it (missing figures stay ``None``,
never guessed):

- Claude Code ``-p --output-format json``: one ``{"type": "result", "num_turns", "usage": {...}}`` object
  (no tool calls in this format);
- Claude Code ``-p --output-format stream-json --verbose``: JSON lines; every ``tool_use`` block of an
  ``assistant`` message is a tool call; the last ``result`` line carries ``num_turns`` and ``usage``;
- Codex ``exec --json``: JSON lines; every completed item of a tool kind (``command_execution``,
  ``mcp_tool_call``, ``web_search``, ``file_change``) is a tool call; each ``turn.completed`` carries ``usage``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

FIELDS = ("wall_seconds", "tool_calls", "turns", "input_tokens", "output_tokens", "cached_input_tokens")
CODEX_TOOL_ITEMS = frozenset({"command_execution", "mcp_tool_call", "web_search", "file_change"})


def _objects(text: str) -> list[dict]:
    """Every JSON object of ``text``: the whole text as one object, else one per line (other lines skipped)."""
    text = text.strip()
    if not text:
        return []
    try:
        whole = json.loads(text)
        return [whole] if isinstance(whole, dict) else [o for o in whole if isinstance(o, dict)] \
            if isinstance(whole, list) else []
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def _claude_tokens(usage: dict) -> dict:
    cached = sum(int(usage.get(k) or 0) for k in ("cache_read_input_tokens", "cache_creation_input_tokens"))
    return {"input_tokens": int(usage.get("input_tokens") or 0) + cached,
            "output_tokens": int(usage.get("output_tokens") or 0), "cached_input_tokens": cached}


def parse_transcript(text: str) -> dict:
    """``{client, tool_calls, turns, input_tokens, output_tokens, cached_input_tokens}`` from a client's output;
    ``{}`` when the output is none of the known formats. ``input_tokens`` includes cached input."""
    objs = _objects(text)
    results = [o for o in objs if o.get("type") == "result" and ("usage" in o or "num_turns" in o)]
    if results:
        last = results[-1]
        streamed = any(o.get("type") in ("assistant", "system", "user") for o in objs)
        tools = None
        if streamed:
            tools = sum(1 for o in objs if o.get("type") == "assistant"
                        for block in ((o.get("message") or {}).get("content") or [])
                        if isinstance(block, dict) and block.get("type") == "tool_use")
        out = {"client": "claude-code " + ("stream-json" if streamed else "json"), "tool_calls": tools,
               "turns": last.get("num_turns")}
        out.update(_claude_tokens(last.get("usage") or {}))
        return out
    if any(str(o.get("type", "")).startswith(("thread.", "turn.", "item.")) for o in objs):
        turns = [o for o in objs if o.get("type") == "turn.completed"]
        usage = {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0}
        for t in turns:
            for k in usage:
                usage[k] += int((t.get("usage") or {}).get(k) or 0)
        tools = sum(1 for o in objs if o.get("type") == "item.completed"
                    and (o.get("item") or {}).get("type") in CODEX_TOOL_ITEMS)
        return {"client": "codex exec --json", "tool_calls": tools, "turns": len(turns), **usage}
    return {}


def job_effort(wall_seconds: float, stdout: str) -> dict:
    """One job's record: its wall time and whatever its client's output tells."""
    parsed = parse_transcript(stdout)
    return {"wall_seconds": round(wall_seconds, 1), "client": parsed.get("client"),
            **{k: parsed.get(k) for k in FIELDS[1:]}}


def effort_file(run: Path, condition: str | None, arm: str, trial: str, task: str) -> Path:
    base = run / "_effort" / condition if condition else run / "_effort"
    return base / arm / str(trial) / f"{task}.json"


def read_effort(run: Path, condition: str | None, arm: str) -> dict[tuple[str, str], dict]:
    """``{(task, trial): record}`` of the effort files of one arm (written by ``eval run --agent``, or by whoever
    ran the assistants, in the same shape)."""
    base = (run / "_effort" / condition if condition else run / "_effort") / arm
    out = {}
    for f in sorted(base.glob("*/*.json")) if base.is_dir() else []:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out[(f.stem, f.parent.name)] = data
    return out


def summarise(records: list[dict]) -> dict:
    """Per arm: how many jobs have each figure, its median and its total."""
    out: dict = {"jobs": len(records)}
    for key in FIELDS:
        values = [r[key] for r in records if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        out[key] = ({"jobs": len(values), "median": round(statistics.median(values), 1), "total": round(sum(values), 1)}
                    if values else {"jobs": 0, "median": None, "total": None})
    return out
