#!/usr/bin/env bash
# Set up (a .venv with tea_notebook[dev,docs]) and run every test. Extra arguments go to pytest.
# With no arguments (what CI runs) it first runs the static checks (ruff check, ruff format --check and
# mypy: scripts/lint.sh), then builds the documentation site with --strict (what scripts/docs.sh does)
# and smoke-tests the wheel installed with no extras (scripts/smoke_wheel.sh);
# TEA_STATIC_CHECKS=0 skips the static checks and TEA_PACKAGE_CHECKS=0 the other two; =1 runs them with
# arguments too. Any of them failing fails the run, after the suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" dev,docs
source "$(dirname "${BASH_SOURCE[0]}")/lint.sh"
ensure_bubblewrap
ensure_browser
cd "$ROOT"
failed=()
if [ "${TEA_STATIC_CHECKS:-$([ $# -eq 0 ] && echo 1 || echo 0)}" = "1" ]; then
    run_static_checks
fi
if [ "${TEA_PACKAGE_CHECKS:-$([ $# -eq 0 ] && echo 1 || echo 0)}" = "1" ]; then
    echo "==> the documentation site (mkdocs build --strict)"
    start=$(date +%s)
    site="$(mktemp -d "${TMPDIR:-/tmp}/tea-site.XXXXXX")"
    NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$site" \
        || failed+=("the documentation build (mkdocs build --strict)")
    rm -rf "$site"
    echo "==> built in $(( $(date +%s) - start ))s"
    echo "==> the wheel, installed with no extras (scripts/smoke_wheel.sh)"
    bash scripts/smoke_wheel.sh || failed+=("the wheel smoke suite")
    echo "==> the test suite"
fi
set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "no tests were collected" >&2
fi
if [ "${#failed[@]}" -gt 0 ]; then
    printf '==> FAILED besides the test suite: %s\n' "${failed[@]}" >&2
    [ "$status" -ne 0 ] || status=1
fi
exit "$status"
