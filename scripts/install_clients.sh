#!/usr/bin/env bash
# Install the real assistant clients the `clients` tests drive (tests/clients/), into a cached prefix:
#   .cache/clients/pinned/  the pinned versions below (npm: Claude Code, Codex CLI; PyPI: skills-ref in a venv)
#   .cache/clients/latest/  with CLIENTS_LATEST=1: the newest of each, resolved again once a day
# Prints the prefix on stdout (progress on stderr). Re-running skips the install while its stamp matches.
# Run the tests against the newest clients:  CLIENTS_LATEST=1 bash scripts/test.sh -m clients
# Needs Node.js with npm and Python 3.11+; nothing is installed outside .cache/clients/.
set -euo pipefail
PACK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$PACK_ROOT"
die() { printf 'install_clients: %s\n' "$*" >&2; exit 1; }
say() { printf '[clients] %s\n' "$*" >&2; }
source "$PACK_ROOT/scripts/find_python.sh"  # sets BASE_PY

CLAUDE_CODE_VERSION="2.1.332"
CODEX_VERSION="0.169.0"
# skills-ref: the pin of pyproject.toml's dev extra (the pack's validator runs the same version).
SKILLS_REF="$("$BASE_PY" -c 'import tomllib; print(next(p for p in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"] if p.startswith("skills-ref==")))')" \
  || die "pyproject.toml's dev extra has no skills-ref== pin"

command -v npm >/dev/null 2>&1 || die "npm is required to install the clients (Debian/Ubuntu: apt-get install nodejs npm)"
if [ "${CLIENTS_LATEST:-0}" = "1" ]; then
  prefix="$PACK_ROOT/.cache/clients/latest"
  pkgs="@anthropic-ai/claude-code@latest @openai/codex@latest"
  py_pkg="skills-ref"
  stamp="latest $(date -u +%F)"
else
  prefix="$PACK_ROOT/.cache/clients/pinned"
  pkgs="@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION @openai/codex@$CODEX_VERSION"
  py_pkg="$SKILLS_REF"
  stamp="$pkgs $py_pkg $("$BASE_PY" --version) $(node --version) $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
fi
if [ "$(cat "$prefix/.clients-stamp" 2>/dev/null)" != "$stamp" ]; then
  say "installing $pkgs and $py_pkg into $prefix (first run downloads ~400 MB)"
  # Installed in place (a venv cannot move); the stamp is written last, so a failed or interrupted
  # install is redone from scratch next time, and a failure removes what it wrote.
  rm -rf "$prefix"
  mkdir -p "$prefix"
  # Claude Code's npm package declares node >=22 for its installer script; the client itself is a native
  # binary from a platform package, so the install works on Node 20 with an engine warning.
  # shellcheck disable=SC2086
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error $pkgs >&2 \
    || { rm -rf "$prefix"; die "npm install of the clients failed; see the messages above"; }
  "$BASE_PY" -m venv "$prefix/venv" || { rm -rf "$prefix"; die "could not create a virtual environment"; }
  "$prefix/venv/bin/python" -m pip install --disable-pip-version-check -q "$py_pkg" >&2 \
    || { rm -rf "$prefix"; die "pip install $py_pkg failed; see the messages above"; }
  echo "$stamp" > "$prefix/.clients-stamp"
fi
for exe in node_modules/.bin/claude node_modules/.bin/codex venv/bin/agentskills; do
  [ -x "$prefix/$exe" ] || die "$prefix/$exe is missing after the install"
done
say "$("$prefix/node_modules/.bin/claude" --version 2>/dev/null | head -n 1); $("$prefix/node_modules/.bin/codex" --version 2>/dev/null | tail -n 1); $py_pkg"
echo "$prefix"
