#!/usr/bin/env bash
# The main job: set up, then run the tea_notebook demo (the notebook layer will open the tutorials
# in JupyterLab here). --headless writes the demo's output to docs/_run/ and prints where.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" ""
cd "$ROOT"
if [ "${1:-}" = "--headless" ]; then
    mkdir -p docs/_run
    "$VENV/bin/tea" demo --workspace docs/_run/demo-workspace | tee docs/_run/demo.txt
    echo "==> demo output written to $ROOT/docs/_run/demo.txt"
else
    "$VENV/bin/tea" demo --workspace docs/_run/demo-workspace
fi
