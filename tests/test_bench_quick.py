"""Every benchmark in bench/ still runs: each script in its ``--quick`` mode (tiny sizes), so none
rots between the full runs that write docs/benchmarks.md. Nothing here asserts anything about
time (speed claims are the benchmarks' own business); a script that fails or refuses ``--quick``
fails its test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "bench").glob("bench_*.py"))
#: seconds a --quick run may take (below the suite's 300 s per test)
QUICK_LIMIT = 240

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_every_bench_script_is_collected():
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_bench_script_runs_in_quick_mode(script: Path):
    docs = ROOT / "docs" / "benchmarks.md"
    before = docs.read_bytes() if docs.exists() else None
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    try:  # within the suite's own per-test limit (pyproject: timeout = 300), so a slow one says which
        done = subprocess.run(
            [sys.executable, str(script), "--quick"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=QUICK_LIMIT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script.name} --quick took over {QUICK_LIMIT} s: a smoke run should take seconds")
    assert done.returncode == 0, f"{script.name} --quick failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{script.name} --quick printed no results"
    # a smoke run never rewrites the published figures
    assert (docs.read_bytes() if docs.exists() else None) == before


def test_quick_refuses_write():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_runtime.py"), "--quick", "--write"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "--quick" in done.stderr
