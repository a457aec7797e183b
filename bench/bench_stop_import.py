"""Stop (■, a kernel interrupt) while the first hosted model call imports litellm (issue 32).

    .venv/bin/python bench/bench_stop_import.py [--write] [--reps 5] [--quick]

Each repetition starts a fresh kernel (so ``import litellm`` has not happened yet), loads the extension, runs an
offline warm-up cell (which imports no litellm), then sends ``%%agent --model openai/gpt-4o-mini --api-base
http://127.0.0.1:9/v1`` (a closed local port: nothing leaves the machine). When the cell's live view says it is
importing litellm it waits 0.2 s and interrupts the kernel, then measures how long the cell takes to reply
(what a person waits for ■), and how long the import itself then goes on in the background (until
``litellm_ready()``). The floor: the same interrupt sent to a cell that runs ``time.sleep(30)`` (how fast this
kernel answers an interrupt at all). Wall seconds, min / median / max over ``--reps`` kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402
from bench_notebook import _kernel  # noqa: E402

HOSTED = "--model openai/gpt-4o-mini --api-base http://127.0.0.1:9/v1"
READY = "__import__('tea_notebook.models.client', fromlist=['litellm_ready']).litellm_ready()"
TARGET_S = 1.0


def _run(kc: Any, code: str, timeout: float = 120) -> dict[str, Any]:
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {code!r}: {reply['content']}")
    return reply["content"]


def _value(kc: Any, expr: str) -> Any:
    """The value of ``expr`` in the kernel (through a printed JSON line)."""
    seen: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            seen.append(msg["content"]["text"])

    kc.execute_interactive(f"import json as _j; print(_j.dumps({expr}))", timeout=60, output_hook=hook)
    return json.loads("".join(seen).strip().splitlines()[-1])


def _wait_reply(kc: Any, msg_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg


def _interrupted_after(km: Any, kc: Any, code: str, marker: str | None) -> float:
    """Send ``code``, interrupt 0.2 s after ``marker`` shows on iopub (or after 0.5 s), and return the
    seconds from the interrupt to the cell's reply."""
    msg_id = kc.execute(code)
    sent = time.monotonic()
    if marker is None:
        time.sleep(0.5)
    else:
        while True:
            msg = kc.get_iopub_msg(timeout=max(0.1, sent + 60 - time.monotonic()))
            if marker in json.dumps(msg["content"]):
                break
        time.sleep(0.2)
    interrupted = time.monotonic()
    km.interrupt_kernel()
    _wait_reply(kc, msg_id)
    return time.monotonic() - interrupted


def one_kernel(tmp: Path, i: int) -> dict[str, float]:
    """One fresh kernel: the stop during the import, the import's remaining time, and the floor."""
    km, kc = _kernel(sys.executable)
    try:
        _run(kc, "%load_ext tea_notebook")
        _run(kc, f'%config TeaMagics.workspace_path = "{tmp / f"ws{i}"}"')
        _run(kc, "import os; os.environ['OPENAI_API_KEY'] = 'sk-bench-not-a-real-key'")
        _run(kc, "%%agent --model tea/test --quiet\nWarm up.")
        if _value(kc, "'litellm' in __import__('sys').modules"):
            raise RuntimeError("litellm was imported before the hosted call")
        stop = _interrupted_after(km, kc, f"%%agent {HOSTED}\nSay hi.", "importing litellm")
        ready_from = time.monotonic()
        background = None
        if not _value(kc, READY):
            while not _value(kc, READY):
                if time.monotonic() - ready_from > 120:
                    raise RuntimeError("litellm's import never finished in the background")
                time.sleep(0.05)
            background = time.monotonic() - ready_from
        floor = _interrupted_after(km, kc, "import time; time.sleep(30)", None)
        return {"stop": stop, "floor": floor, "background": background if background is not None else 0.0}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / **{statistics.median(values):.2f}** / {max(values):.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--reps", type=int, default=5, help="fresh kernels")
    args = parse_args(parser, reps=1)
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp())
    runs = [one_kernel(tmp, i) for i in range(args.reps)]
    for r in runs:
        print(r, flush=True)
    stops = [r["stop"] for r in runs]
    median = statistics.median(stops)
    section = f"""## Stop during the first hosted call's litellm import

Command: `{command_line()}` — machine: {machine()}; run {time.strftime("%Y-%m-%d")}; load average (1-min)
{load_before:.2f} before, {os.getloadavg()[0]:.2f} after, on 2 cores shared with other work.

A fresh kernel each time (n = {args.reps}): `%load_ext tea_notebook`, an offline warm-up cell, then `%%agent {HOSTED}`
(a closed local port); 0.2 s after its live view says it is importing litellm the kernel is interrupted (■). Wall
seconds from the interrupt to the cell's reply, min / **median** / max; the import goes on in the background and
the next hosted call finds it done. The floor is the same interrupt sent to `time.sleep(30)` in the same kernel.

| what | wall | target | |
|---|---|---|---|
| ■ during `import litellm`: the cell replies after | {spread(stops)} | ≤ {TARGET_S:g} s | {"✅" if median <= TARGET_S else "❌"} |
| floor: ■ during `time.sleep(30)` | {spread([r["floor"] for r in runs])} | | |
| the import then goes on in the background for | {spread([r["background"] for r in runs])} | | |

Before issue 32 the stop waited for the import to finish: the kernel stayed busy 8–11 s after ■ (issue 32's
measurement, 2026-11-28, load 7–14).
"""
    publish(section, args.write)


if __name__ == "__main__":
    main()
