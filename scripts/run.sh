#!/usr/bin/env bash
# The main job: set up (a .venv with tea_notebook[lab]), then open the tutorial notebooks in
# JupyterLab (other arguments go to JupyterLab, e.g. --port 8899). --headless instead executes the
# quickstart notebook (offline unless TEA_MODEL is set) and writes it, executed, with an HTML
# rendering to docs/_run/; the exit code is 0 only when every cell ran.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" lab
ensure_bubblewrap
ensure_browser  # the orchestra tutorial drives a browser
cd "$ROOT"
if [ "${1:-}" = "--headless" ]; then
    exec "$VENV/bin/tea" notebooks --headless --out docs/_run
else
    exec "$VENV/bin/tea" notebooks ${1:+--} "$@"
fi
