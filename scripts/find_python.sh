#!/usr/bin/env bash
# Sourced by scripts/setup.sh and scripts/package.sh: sets BASE_PY to a Python 3.11+ interpreter
# ($PYTHON if set), or stops with a one-line error naming what to install. Needs die() defined.
find_python() {
  local c
  for c in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  return 1
}
BASE_PY="$(find_python)" || die "Python 3.11 or later is required (found: $(python3 --version 2>&1 || echo none)). Install it (Debian/Ubuntu: apt-get install python3.11 python3.11-venv; macOS: brew install python@3.11) or set PYTHON=/path/to/python3.11."
