#!/usr/bin/env bash
# The main job: set-up (venv, the JVM sink jar), then the demo: one simulated stream into
# Postgres three ways — real-time mode + JVM sink, real-time mode + Python foreach, and
# micro-batch — each verified (0 missing, 0 duplicated), then compared side by side with a
# JSON report and a latency chart in demo-output/. About two minutes; `--path` picks one.
# Uses PG_DSN when set, otherwise a throwaway local Postgres. `--help` lists every flag.
set -euo pipefail
PACK_NEED_NODE=0 source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$PY" -m pack_lab.demo "$@"
