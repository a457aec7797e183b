"""Play an eval set in a child process, for ``test_eval_sets.py``'s kill-and-resume test: the test
kills this process with SIGKILL part-way through and then resumes the set itself.

    python eval_set_host.py WORKSPACE TASKS.jsonl SET DELAY LOG

Two scripted configurations (``tea/script:host-a`` and ``host-b``, not LLMs), two epochs each; every
model call appends ``MODEL TASK`` to LOG (so the test counts what ran, across both processes).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time


def solver(label: str, delay: float, log: str):
    """A scripted model that answers the sum after ``delay`` seconds and logs the call."""
    from tea_notebook.models.offline import call

    def script(messages: list, tools: list) -> object:
        text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        a, b = re.search(r"What is (\d+) \+ (\d+)", text).groups()
        with open(log, "a") as out:
            out.write(f"{label} {a}\n")
        time.sleep(delay)
        return call("done", success=True, text=f"FINAL ANSWER: {int(a) + int(b)}")

    return script


def build(ws, delay: float, log: str) -> list:
    """The set's two configurations, as the test builds them again after the kill."""
    from tea_notebook.models.offline import ScriptedModel

    models = [ScriptedModel(solver(x, delay, log), name=f"host-{x}") for x in ("a", "b")]
    return [ws.agent(f"solver-{x}", model=m.name, tools=[]) for x, m in zip("ab", models)]


def main() -> None:
    ws_path, tasks_path, name, delay, log = sys.argv[1:6]
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import tea_notebook
    from tea_notebook.eval import eval_set

    ws = tea_notebook.Workspace(ws_path, embedder="hashing")
    agents = build(ws, float(delay), log)
    result = eval_set(ws, name, agents=agents, tasks=tasks_path, epochs=2, progress="off")
    print(json.dumps(result.table(), default=str), flush=True)


if __name__ == "__main__":
    main()
