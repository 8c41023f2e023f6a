"""CONT001: a comment next to a line-continuation backslash (text level: the code usually does not parse).

Both ``x = a \\  # note`` (the backslash is not last on the line: syntax
error) and ``.select("a")  # note \\`` (the backslash sits inside the
comment, so the statement ends there) are reported.
"""

from __future__ import annotations

from rtm_lakebase.check.findings import Finding


def _comment_start(line: str, in_triple: str | None) -> tuple[int | None, str | None]:
    """Index of a '#' starting a comment (None if none) and the triple-quote state after the line."""
    i, quote = 0, None
    n = len(line)
    while i < n:
        ch = line[i]
        if in_triple:
            if line.startswith(in_triple, i):
                i += 3
                in_triple = None
                continue
            i += 2 if ch == "\\" else 1
            continue
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
            i += 1
            continue
        if line.startswith('"""', i) or line.startswith("'''", i):
            in_triple = line[i:i + 3]
            i += 3
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "#":
            return i, in_triple
        i += 1
    return None, in_triple


def check(source: str, path: str) -> list[Finding]:
    out: list[Finding] = []
    triple: str | None = None
    for lineno, line in enumerate(source.splitlines(), 1):
        start, triple = _comment_start(line, triple)
        if start is None:
            continue
        code, comment = line[:start], line[start:]
        if code.rstrip().endswith("\\"):
            out.append(Finding(path, lineno, len(code.rstrip()), "CONT001",
                               "comment after a line-continuation backslash (syntax error); use parentheses"))
        elif comment.rstrip().endswith("\\"):
            out.append(Finding(path, lineno, start + 1, "CONT001",
                               "backslash at the end of a comment does not continue the line; use parentheses"))
    return out
