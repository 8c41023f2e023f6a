"""The checker's limits: every input is checked in bounded time and memory, whatever a file holds.

A file past a limit becomes a coded finding (PACK004, PACK005, PACK002) instead of a crash or a hang.
The pack's validator (``scripts/skills.py rules`` prints all its limits) uses the same values.
"""

from __future__ import annotations

#: Largest file read (bytes; the pack's largest reference is ~37 KB). Larger is PACK004, not scanned.
MAX_FILE_BYTES = 256 * 1024
#: At most this many findings are printed per file; the rest are summed up in one PACK005 finding.
MAX_FINDINGS_PER_FILE = 50
#: Deepest nesting accepted in JSON (notebooks) and YAML: lists/mappings inside each other.
MAX_NESTING = 64
#: Most files one run checks when a folder is given.
MAX_FILES = 5_000
