# Shared by scripts/demo.sh and scripts/test.sh: a project virtualenv with msgx installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MSGX_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

ensure_venv() {
  local extra="$1"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  echo "== installing msgx${extra:+[$extra]} into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT${extra:+[$extra]}"
}
