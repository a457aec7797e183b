#!/usr/bin/env bash
# The package as users get it: build the sdist and the wheel (python -m build: the wheel is built from the
# sdist), install the WHEEL with no extras into a clean virtualenv, and run tests/smoke_installed against
# that install only (from a folder outside the checkout). Run by scripts/test.sh; alone:
#   bash scripts/smoke_wheel.sh            (uses .venv for `build`; set TEA_SMOKE_KEEP=1 to keep the folder)
# Exit code 0 only when the build, the install and every smoke test pass.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tea-smoke.XXXXXX")"
if [ -z "${TEA_SMOKE_KEEP:-}" ]; then trap 'rm -rf "$WORK"' EXIT; else echo "==> smoke: keeping $WORK"; fi
step() { echo "==> smoke: $*"; }
seconds() { echo $(( $(date +%s) - $1 ))s; }

start=$(date +%s)
step "building the sdist and the wheel (python -m build)"
"$VENV/bin/python" -m build --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 || {
    tail -40 "$WORK/build.log" >&2
    echo "==> smoke: FAILED: python -m build (log above)" >&2
    exit 1
}
wheel=$(ls "$WORK"/dist/*.whl)
step "built $(cd "$WORK/dist" && ls | tr '\n' ' ')in $(seconds "$start")"

t=$(date +%s)
step "installing the wheel with no extras into a clean virtualenv"
"$PY" -m venv "$WORK/venv"
SMOKE_PY="$WORK/venv/bin/python"
pip_install() {  # pip_install WHAT ARGS...: fails the job, with pip's log, when pip fails
    local what="$1"; shift
    "$SMOKE_PY" -m pip install --disable-pip-version-check "$@" >"$WORK/pip.log" 2>&1 || {
        grep -v "^WARNING: Location" "$WORK/pip.log" | tail -30 >&2
        echo "==> smoke: FAILED: installing $what (log above)" >&2
        exit 1
    }
}
pip_install "the wheel" "$wheel"
"$SMOKE_PY" -m pip freeze --all >"$WORK/venv/pre-tools-freeze.txt"
# test tools only (nothing of tea_notebook's extras); the suite checks that they replaced no installed package
pip_install "the test tools" pytest ipykernel nbclient "jupyterlab>=4.2,<5"
step "installed in $(seconds "$t")"

mkdir "$WORK/suite" "$WORK/home"
cp "$ROOT/tests/smoke_installed/smoke_installed.py" "$ROOT/tests/docfactory.py" "$WORK/suite/"
step "running the smoke suite against $WORK/venv (from $WORK/suite, outside the checkout)"
cd "$WORK/suite"
# the last line is pytest's summary; the exit code is pytest's
env -u PYTHONPATH -u TEA_MODEL TEA_SMOKE_CHECKOUT="$ROOT" HOME="$WORK/home" \
    "$SMOKE_PY" -m pytest -p no:cacheprovider -o python_files="smoke_*.py" --rootdir "$WORK/suite" \
    -q -rfE smoke_installed.py
