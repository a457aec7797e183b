"""What the benchmark scripts share: the machine line, sample summaries and writing a section of
docs/benchmarks.md."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"


def machine() -> str:
    """Cores, CPU model, memory, Python and OS of this machine."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}, {platform.system()}"


def command_line() -> str:
    """The command that produced the figures, as it was typed (arguments included, ``--write`` only when
    it was given), for the "Command:" line of a section."""
    script = Path(sys.argv[0]).resolve()
    try:
        shown = str(script.relative_to(ROOT))
    except ValueError:
        shown = str(script)
    return " ".join([".venv/bin/python", shown, *(shlex.quote(a) for a in sys.argv[1:])])


def summary(samples: list[float]) -> dict[str, float]:
    """Median, p95, min, max and count of samples in seconds, reported in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p95_ms": p95 * 1000,
        "min_ms": ordered[0] * 1000,
        "max_ms": ordered[-1] * 1000,
        "n": len(ordered),
    }


def write_section(section: str) -> None:
    """Replace the section with the same ``## `` heading in docs/benchmarks.md (or append it)."""
    heading = section.splitlines()[0]
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n\nFigures written by the scripts in `bench/`.\n"
    start = text.find(heading)
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section.rstrip() + "\n" + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + section
    DOC.write_text(text)


def publish(section: str, write: bool) -> None:
    """Print a results section, and with ``write`` put it into docs/benchmarks.md."""
    print(section)
    if write:
        write_section(section)


def parse_args(parser: argparse.ArgumentParser, **quick: object) -> argparse.Namespace:
    """Parse the command line, with ``--quick``: a smoke run that sets the options in ``quick``
    (tiny sizes) so CI runs every script in seconds; its figures measure nothing, so ``--write``
    is refused with it."""
    parser.add_argument("--quick", action="store_true", help="a smoke run with tiny sizes (figures mean nothing)")
    args = parser.parse_args()
    if args.quick:
        if getattr(args, "write", False):
            parser.error("--quick runs measure nothing: it cannot be combined with --write")
        for name, value in quick.items():
            setattr(args, name, value)
    return args


def run_child(script: str, *args: str) -> dict:
    """Run ``script --child ARGS`` in a fresh interpreter (a measurement that needs a process of its
    own) and return the JSON its last line of output prints; a failed child raises with its output."""
    done = subprocess.run(
        [sys.executable, script, "--child", *args], capture_output=True, text=True, cwd=ROOT, timeout=1800
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
