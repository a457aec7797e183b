#!/usr/bin/env bash
# Shared setup for run.sh and test.sh: a project virtualenv in .venv with tea_notebook installed.
# Sourced, not run. Re-running is cheap: pip only installs what changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "tea_notebook needs Python >= 3.11; $PY is $("$PY" --version 2>&1). Set PYTHON=/path/to/python3.11" >&2
    exit 2
fi
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
EXTRAS="${1:-}"
STAMP="$VENV/.installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    echo "==> installing tea_notebook${EXTRAS:+[$EXTRAS]} into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT${EXTRAS:+[$EXTRAS]}"
    touch "$STAMP"
fi
