#!/usr/bin/env bash
# Set-up shared by the pack's two commands (scripts/demo.sh, scripts/test.sh).
# Checks prerequisites, then creates .venv and installs the pinned Python and
# npm dependencies. Re-running is cheap: installs are skipped while pyproject.toml
# and package-lock.json are unchanged. Source it; it defines $PY (the venv python).
set -euo pipefail

PACK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$PACK_ROOT"

die() { printf 'setup: %s\n' "$*" >&2; exit 1; }
say() { printf '[setup] %s\n' "$*" >&2; }

# --- Python 3.11+ --------------------------------------------------------------
source "$PACK_ROOT/scripts/find_python.sh"  # sets BASE_PY

# --- Java 17+ (PySpark 4.3 runs on Java 17 or 21) --------------------------------
JAVA_BIN="java"
[ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ] && JAVA_BIN="$JAVA_HOME/bin/java"
command -v "$JAVA_BIN" >/dev/null 2>&1 || die "Java 17 or later is required for PySpark and was not found. Install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17) or set JAVA_HOME."
java_major="$("$JAVA_BIN" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\(\.[0-9]*\)*.*/\1/p' | head -n 1)"
[ -n "$java_major" ] && [ "$java_major" -ge 17 ] || die "Java 17 or later is required for PySpark 4.3; found: $("$JAVA_BIN" -version 2>&1 | head -n 1). Install openjdk-17 and set JAVA_HOME."

# --- virtual environment ---------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $BASE_PY"
  "$BASE_PY" -m venv .venv || die "could not create a virtual environment; install the venv module (Debian/Ubuntu: apt-get install python3-venv)"
fi
PY="$PACK_ROOT/.venv/bin/python"
stamp_py="$( (cat pyproject.toml; "$PY" --version) | sha256sum | cut -c1-16)"
if [ "$(cat .venv/.setup-stamp 2>/dev/null)" != "$stamp_py" ]; then
  say "installing pinned Python dependencies (first run downloads pyspark, ~450 MB)"
  "$PY" -m pip install --disable-pip-version-check -q --upgrade pip
  "$PY" -m pip install --disable-pip-version-check -q -e '.[dev]' || die "pip install failed; see the messages above"
  echo "$stamp_py" > .venv/.setup-stamp
fi

source "$PACK_ROOT/scripts/install_jars.sh"  # pinned Maven Central jars: Kafka broker, Spark's Kafka connector, pgjdbc
source "$PACK_ROOT/scripts/build_jvm_sink.sh"  # the JVM sink jar and the Postgres JDBC driver
source "$PACK_ROOT/scripts/install_chromium.sh"  # chromium for the site's browser test (installed in CI)
source "$PACK_ROOT/scripts/install_bubblewrap.sh"  # bubblewrap: the sandbox graded eval answers run in (installed in CI)

# --- Node tools (markdownlint) ---------------------------------------------------
NEED_NODE="${PACK_NEED_NODE:-1}"
if [ "$NEED_NODE" = "1" ]; then
  # One Node requirement: package.json "engines" (every locked package accepts it; tests/test_node_requirement.py).
  NODE_REQUIRED="^20.17.0 || >=22.9.0"
  command -v node >/dev/null 2>&1 || die "Node.js $NODE_REQUIRED is required for the Markdown linter. Install it (Debian/Ubuntu: apt-get install nodejs npm; macOS: brew install node)."
  node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit((a === 20 && b >= 17) || (a === 22 && b >= 9) || a >= 23 ? 0 : 1)' \
    || die "Node.js $NODE_REQUIRED is required for markdownlint-cli 0.48; found $(node --version)."
  stamp_node="$(sha256sum package-lock.json | cut -c1-16)"
  if [ "$(cat node_modules/.setup-stamp 2>/dev/null)" != "$stamp_node" ]; then
    say "installing npm dev tools (markdownlint-cli)"
    npm ci --no-audit --no-fund --loglevel=error >&2 || die "npm ci failed; see the messages above"
    echo "$stamp_node" > node_modules/.setup-stamp
  fi
fi

export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY" NO_MKDOCS_2_WARNING=1
# The pack's lab (pack_lab/) is not installed: Spark's Python workers find it through PYTHONPATH.
export PYTHONPATH="$PACK_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$PACK_ROOT/node_modules/.bin:$PATH"
