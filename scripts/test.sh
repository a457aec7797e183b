#!/usr/bin/env bash
# Set up (a .venv with tea_notebook[dev]) and run every test. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" dev
ensure_bubblewrap
ensure_browser
cd "$ROOT"
set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "no tests were collected" >&2
fi
exit "$status"
