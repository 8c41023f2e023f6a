#!/usr/bin/env bash
# Build the folders an assistant installs: dist/<install-name>/ and its zip, and the plugin folder
# plugins/<install-name>/ (`scripts/skills.py package`; extra arguments go to it).
# Needs Python 3.11+ only: no Java, no PySpark, no Node. The packaging check (links and heading anchors
# resolve inside the installed folder) runs in a small virtual environment, .cache/package-venv/, holding
# the four pins of pyproject.toml's dev extra it imports; re-running skips the install while they are unchanged.
set -euo pipefail
PACK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$PACK_ROOT"
die() { printf 'package: %s\n' "$*" >&2; exit 1; }
say() { printf '[package] %s\n' "$*" >&2; }
source "$PACK_ROOT/scripts/find_python.sh"  # sets BASE_PY

VENV="$PACK_ROOT/.cache/package-venv"
pins="$("$BASE_PY" - <<'PY'
import re, tomllib
dev = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"]
want = {"markdown-it-py", "markdown", "pymdown-extensions", "pyyaml"}
print(" ".join(p for p in dev if re.split(r"[=<>\[; ]", p, maxsplit=1)[0].lower() in want))
PY
)" || die "cannot read the dev pins from pyproject.toml"
[ "$(wc -w <<<"$pins")" -eq 4 ] || die "pyproject.toml's dev extra must pin markdown-it-py, markdown, pymdown-extensions and pyyaml (found: $pins)"
stamp="$( (echo "$pins"; "$BASE_PY" --version) | sha256sum | cut -c1-16)"
if [ "$(cat "$VENV/.package-stamp" 2>/dev/null)" != "$stamp" ]; then
  say "creating $VENV with $pins"
  rm -rf "$VENV"
  "$BASE_PY" -m venv "$VENV" || die "could not create a virtual environment; install the venv module (Debian/Ubuntu: apt-get install python3-venv)"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q $pins || { rm -rf "$VENV"; die "pip install failed; see the messages above"; }
  echo "$stamp" > "$VENV/.package-stamp"
fi
exec "$VENV/bin/python" scripts/skills.py package "$@"
