#!/usr/bin/env bash
# The static checks CI runs: ruff check, ruff format --check and mypy (configured in pyproject.toml: the
# floors it checks, its plugins, the modules without types). scripts/test.sh sources this file and calls
# run_static_checks, which adds each failing check to its `failed` list; alone:
#   bash scripts/lint.sh        (exit code 0 only when every check passes)
# The tools are pinned in the dev extra and run from .venv (set up as scripts/test.sh sets it up).

# static_check NAME COMMAND...: runs COMMAND in the checkout, says how long it took, and appends NAME
# to the `failed` array when it fails
static_check() {
    local name="$1" start status=0
    shift
    echo "==> $name"
    start=$(date +%s)
    (cd "$ROOT" && "$@") || status=$?
    if [ "$status" -eq 0 ]; then
        echo "==> $name: passed in $(( $(date +%s) - start ))s"
    else
        echo "==> $name: FAILED in $(( $(date +%s) - start ))s" >&2
        failed+=("$name")
    fi
}

run_static_checks() {
    static_check "ruff check" "$VENV/bin/ruff" check .
    # one line a file (`ruff format` fixes them), not a diff of each
    static_check "ruff format --check" "$VENV/bin/ruff" format --check --output-format concise .
    static_check "mypy (the floors listed in pyproject.toml)" "$VENV/bin/mypy"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # run, not sourced
    set -euo pipefail
    source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" dev,docs  # the extras (and install stamp) of test.sh
    failed=()
    run_static_checks
    if [ "${#failed[@]}" -gt 0 ]; then
        printf '==> FAILED: %s\n' "${failed[@]}" >&2
        exit 1
    fi
fi
