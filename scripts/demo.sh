#!/usr/bin/env bash
# The main job: set-up, then the local end-to-end demo
# (upstream simulator → real-time-mode query → foreach sink → Postgres).
# Uses PG_DSN when set, otherwise a throwaway local Postgres.
set -euo pipefail
PACK_NEED_NODE=0 source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$PY" -m pack_lab.demo "$@"
