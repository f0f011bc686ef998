# Shared by scripts/demo.sh and scripts/test.sh: a project virtualenv with msgx installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MSGX_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
# Written after a successful install: one line "<key> <extra>" per extra installed with that key.
STAMP="$VENV/.msgx-install-stamp"

# What an editable install depends on beyond the Python sources it links to: the checkout's
# place, and the package metadata and dependencies.
install_key() {
  { echo "$ROOT"; cat "$ROOT/pyproject.toml"; } \
    | sha256sum | cut -d' ' -f1
}

# True when the stamp says this key was installed with `extra` (any extra will do for none: the
# test extra's install includes everything the demo needs) and msgx still imports.
installed() {
  local key="$1" extra="$2"
  [ -f "$STAMP" ] && [ -x "$VENV/bin/msgx" ] || return 1
  if [ -n "$extra" ]; then
    grep -qxF "$key $extra" "$STAMP" || return 1
  else
    grep -q "^$key " "$STAMP" || return 1
  fi
  "$VENV/bin/python" -c "import msgx_engine" 2>/dev/null
}

ensure_venv() {
  local extra="$1" key
  if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  key="$(install_key)"
  if installed "$key" "$extra"; then
    echo "== msgx${extra:+[$extra]} already installed in $VENV (package files unchanged)"
    return 0
  fi
  echo "== installing msgx${extra:+[$extra]} into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT${extra:+[$extra]}"
  # keep the lines of this key (another extra installed with it), drop stale ones
  { grep "^$key " "$STAMP" 2>/dev/null || true; echo "$key ${extra:--}"; } | sort -u >"$STAMP.tmp"
  mv "$STAMP.tmp" "$STAMP"
}
