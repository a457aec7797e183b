"""Play an evaluation in a child process, for ``test_eval.py``'s kill-and-resume test: the test kills
this process with SIGKILL part-way through and then resumes the evaluation itself.

    python eval_host.py WORKSPACE TASKS.jsonl NAME DELAY CONCURRENCY

The agent is scripted (``tea/script:host``, not an LLM): it calls a tool that sleeps DELAY seconds,
then answers the sum asked for.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys


def main() -> None:
    ws_path, tasks_path, name, delay, concurrency = sys.argv[1:6]
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import tea_notebook
    from tea_notebook.eval import evaluate
    from tea_notebook.models.offline import ScriptedModel, call

    ws = tea_notebook.Workspace(ws_path, embedder="hashing")

    @ws.tools.tool
    async def slow_lookup(question: str) -> str:
        """Look the question up (slowly)."""
        await asyncio.sleep(float(delay))
        return "looked up"

    def solver(messages: list, tools: list) -> object:
        text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        if "looked up" not in text:
            return call("slow_lookup", question="sum")
        a, b = re.search(r"What is (\d+) \+ (\d+)", text).groups()
        return call("done", success=True, text=f"FINAL ANSWER: {int(a) + int(b)}")

    model = ScriptedModel(solver, name="host")
    agent = ws.agent("solver", model=model.name, tools=["slow_lookup"])
    results = evaluate(ws, agent, tasks_path, name=name, concurrency=int(concurrency), progress="lines")
    print(json.dumps(results.summary()), flush=True)


if __name__ == "__main__":
    main()
