#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml, docs/) with --strict into build/site/ (open
# build/site/index.html), after setting up .venv with tea_notebook[docs]. Other arguments go to
# `mkdocs build` (e.g. --site-dir DIR); `bash scripts/docs.sh serve` previews it at http://127.0.0.1:8000.
# The pictures in docs/images come from a real JupyterLab: .venv/bin/python scripts/screenshots.py remakes them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" docs
cd "$ROOT"
export NO_MKDOCS_2_WARNING=1  # Material's notice about its successor, printed on every build
if [ "${1:-}" = "serve" ]; then
    shift
    exec "$VENV/bin/mkdocs" serve --strict "$@"
fi
exec "$VENV/bin/mkdocs" build --strict "$@"
