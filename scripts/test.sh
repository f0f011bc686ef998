#!/usr/bin/env bash
# Install msgx with its test extra, make sure PostgreSQL, MariaDB, Redis and a Kafka-wire broker
# answer (starting what is missing), install Debian's prometheus package when promtool is missing
# (the alert-rule tests need it), then run ruff, the import contracts (the layers of
# pyproject.toml), mypy on msgx_engine and msgx_dagster, and the whole test suite. Extra arguments go to pytest (e.g. `bash scripts/test.sh -k pump`).
source "$(dirname "$0")/_env.sh"
source "$(dirname "$0")/services.sh"
ensure_venv test
trap stop_started EXIT
ensure_postgres
ensure_mariadb
ensure_redis
ensure_tansu
ensure_promtool
cd "$ROOT"
echo "== ruff"
"$VENV/bin/ruff" check .
echo "== lint-imports"
"$VENV/bin/lint-imports"
echo "== mypy"
"$VENV/bin/mypy"
echo "== pytest"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=15 "$@"
