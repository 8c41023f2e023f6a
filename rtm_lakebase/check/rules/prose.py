"""Prose rules (PROSE001-PROSE004): claims known to be wrong about real-time mode.

They run on Markdown text outside code blocks and on non-Python blocks. A
match inside a sentence that negates or corrects it ("Photon must be off",
"realTime=True raises an error", "not DBR 13.3") is not reported: the rules
catch claims, not warnings about them.
"""

from __future__ import annotations

import re

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.limits import MAX_FINDINGS_PER_FILE

PATTERNS: list[tuple[str, re.Pattern[str], str]] = [
    ("PROSE001", re.compile(
        r"\bphoton[- ](?:is\s+|must\s+be\s+|should\s+be\s+)?(?:required|needed|enabled|on\b|turned\s+on)"
        r"|\b(?:enable|enabling|turn\s+on|requires?|needs?|with)\s+photon\b"
        r"|\bphoton[- ]accelerat\w*", re.I),
     "Photon is not needed for real-time mode; Databricks requires it off"),
    ("PROSE002", re.compile(r"\b(?:DBR|(?:Databricks\s+)?Runtime)\s*13\.3\b", re.I),
     "real-time mode needs Databricks Runtime 16.4 LTS or later, not 13.3"),
    ("PROSE003", re.compile(r"(?:<|&lt;|under|below|sub-?)\s*800\s*-?\s*(?:ms|milliseconds)\b|\b800\s*-?\s*(?:ms|milliseconds)\b", re.I),
     "an 800 ms latency figure has no source here; quote measured figures"),
    ("PROSE004", re.compile(r"realTime\s*=\s*True\b"),
     "write realTime=\"5 seconds\": the trigger takes a duration string"),
]

NEGATION_RE = re.compile(
    r"\b(?:not|no|never|without|off|disabled?|disabling|wrong|incorrect|false|myth|rejects?|rejected|"
    r"raises?|fails?|error|instead|avoid|don't|doesn't|isn't|aren't|mustn't|cannot|can't|unsupported)\b", re.I)
SENTENCE_END_RE = re.compile(r"(?<=[.!?;])\s+(?=[A-Z`*(\[])|(?<=[.!?;])$")


def _sentence_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    left = 0
    for m in SENTENCE_END_RE.finditer(text, 0, start):
        left = m.end()
    m = SENTENCE_END_RE.search(text, end)
    right = m.start() if m else len(text)
    return left, right


def check_text(segments: list[tuple[int, int, str]], path: str) -> list[Finding]:
    """``segments``: (line, col offset, text) pieces forming one paragraph, joined with spaces."""
    text_parts, starts = [], []
    pos = 0
    for line, col, piece in segments:
        starts.append((pos, line, col))
        text_parts.append(piece)
        pos += len(piece) + 1
    text = " ".join(text_parts)
    out: list[Finding] = []
    for code, pattern, message in PATTERNS:
        for k, m in enumerate(pattern.finditer(text)):
            if k > MAX_FINDINGS_PER_FILE:  # the per-file cap would drop the rest anyway: bounded time
                break
            left, right = _sentence_bounds(text, m.start(), m.end())
            if NEGATION_RE.search(text[left:right]):
                continue
            seg = max((s for s in starts if s[0] <= m.start()), key=lambda s: s[0])
            out.append(Finding(path, seg[1], seg[2] + (m.start() - seg[0]) + 1, code,
                               f"{message} (found {m.group(0)!r})"))
    return out
