#!/usr/bin/env bash
# Install msgx and run the main job on the embedded default (no servers needed): loads a fresh
# generated airport day into an embedded PostgreSQL mailbox and starts `dagster dev` on
# 127.0.0.1:3000 with the inbox sensor on; Ctrl-C stops everything. `bash scripts/demo.sh
# --headless` runs pump_job once through Dagster, prints the summary and exits.
source "$(dirname "$0")/_env.sh"
ensure_venv ""
unset MSGX_DB_URL MSGX_MAILBOX_URL
export MSGX_HOME="${MSGX_HOME:-$ROOT/.msgx}"
exec "$VENV/bin/msgx" demo "$@"
