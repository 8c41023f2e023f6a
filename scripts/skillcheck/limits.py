"""The validator's limits: every input is checked in bounded time and memory, whatever the pack holds.

``skills.py rules`` prints these values; a file past a limit becomes a coded
finding instead of a crash or a hang.
"""

from __future__ import annotations

# The limits a user's file meets in the checker that ships with the skill are defined there, once.
from rtm_lakebase.check.limits import MAX_FILE_BYTES, MAX_FINDINGS_PER_FILE, MAX_NESTING

__all__ = ["MAX_EMPHASIS_MARKERS", "MAX_FILE_BYTES", "MAX_FINDINGS_PER_FILE", "MAX_FRONT_MATTER_BYTES",
           "MAX_HEADINGS", "MAX_NESTING", "describe"]

#: Most emphasis markers ('*' and '_') per Markdown file parsed as emphasis; more is PACK004 (the largest
#: reference has ~500; markdown-it-py 3.0 needs memory quadratic in them within one paragraph).
MAX_EMPHASIS_MARKERS = 5_000
#: Most headings per Markdown file whose anchors are computed; more is PACK004.
MAX_HEADINGS = 2_000
#: Largest SKILL.md front matter (bytes); the Agent Skills fields fit in far less.
MAX_FRONT_MATTER_BYTES = 64 * 1024


def describe() -> str:
    return (f"Limits: files over {MAX_FILE_BYTES:,} bytes are not scanned (PACK004); "
            f"files with more than {MAX_EMPHASIS_MARKERS:,} '*'/'_' are read without emphasis (PACK004); "
            f"files with more than {MAX_HEADINGS:,} headings get anchors for the first {MAX_HEADINGS:,} only (PACK004); "
            f"at most {MAX_FINDINGS_PER_FILE} findings are shown per file, the rest counted in one PACK005; "
            f"YAML/JSON nesting deeper than {MAX_NESTING} levels and front matter over "
            f"{MAX_FRONT_MATTER_BYTES:,} bytes are refused (FM001/MAN002); Python too deeply nested for "
            f"the parser or the rules is PY002; FIFOs, devices, sockets, directories named like files and "
            f"symlinks leaving the pack are never opened (PACK003).")
