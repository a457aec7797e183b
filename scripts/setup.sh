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
    # the install builds the JupyterLab extension (extension/ → tea_notebook/labextension); it needs Node
    if [ ! -f "$ROOT/tea_notebook/labextension/package.json" ]; then
        echo "==> the JupyterLab extension was not built (is Node >= 18 on PATH?); everything else works" >&2
    fi
fi

# Debian/Ubuntu packages the project needs from the system, installed when we may (root or
# passwordless sudo): apt_install PACKAGE WHY
apt_install() {
    local SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
            echo "==> $1 is missing and there is no root to install it: $2" >&2
            echo "    install it with 'apt-get install $1'" >&2
            return 0
        fi
    fi
    if ! command -v apt-get >/dev/null; then
        echo "==> $1 is missing and there is no apt-get: $2" >&2
        return 0
    fi
    echo "==> installing Debian's $1"
    if [ -z "${APT_UPDATED:-}" ]; then
        $SUDO apt-get update -qq >/dev/null
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$1" >/dev/null
}

# bubblewrap: the security boundary around sandboxed code (without it the sandbox falls back to a
# weaker child process and warns)
ensure_bubblewrap() {
    command -v bwrap >/dev/null || apt_install bubblewrap "the sandbox will run without its security boundary"
}

# A Chromium for the browser environment: Playwright's own if present, else the system one; on a
# fresh Debian/Ubuntu machine (CI) install Debian's chromium when we may (root or passwordless sudo).
ensure_browser() {
    if "$VENV/bin/python" -c 'import sys
from tea_notebook.envs.browser import find_chromium
sys.exit(0 if find_chromium() else 1)' 2>/dev/null; then
        return 0
    fi
    apt_install chromium "browser tests and the browser environment will not work (or: playwright install chromium)"
}
