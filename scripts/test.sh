#!/usr/bin/env bash
# The whole test suite: set-up, then pytest (validator, lab, support matrix, sink, demo).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k sink -x`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$PY" -m pytest "$@"
