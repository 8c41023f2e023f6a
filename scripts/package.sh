#!/usr/bin/env bash
# Build the folder an assistant installs (dist/<install-name>/ and its zip):
# the pack's set-up, then `scripts/skills.py package`. Extra arguments go to it.
set -euo pipefail
PACK_NEED_NODE=0 source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$PY" scripts/skills.py package "$@"
