"""Play the host for ``test_host_writers.py``: a scripted run whose sandboxed code plants something
in its own run folder (a link to a host file, a named pipe), after which the run goes on and host
code reads and writes there (the todo tool, the run's view). Prints one JSON line with what the
model saw, what a notebook would show and store, and what is left in the run folder. The tests run
it as root and as an unprivileged user.

    python host_writers_host.py '{"attacks": {"name": {"ws": "...", "plant": "<python code>", "actions": [...]}}}'

Standard library and tea_notebook only (the unprivileged user may have no other interpreter).
"""

from __future__ import annotations

import json
import os
import stat
import sys


def main() -> None:
    config = json.loads(sys.argv[1])
    from tea_notebook.envs import boundary

    report: dict = {"uid": os.getuid()}
    if boundary.bubblewrap() is None:
        report["unavailable"] = boundary.fallback_reasons(root_inside=os.geteuid() == 0, isolated=False)
        print(json.dumps(report), flush=True)
        return
    for name, attack in config["attacks"].items():
        report.setdefault("runs", {})[name] = attacked_run(attack)
    print(json.dumps(report), flush=True)


def attacked_run(attack: dict) -> dict:
    """One scripted run in a fresh workspace: the planting code in the sandbox, then ``todo``
    calls, then ``done``; what it left and showed."""
    import tea_notebook
    from tea_notebook.models.offline import ScriptedModel, call
    from tea_notebook.runtime.render import mimebundle, payload

    report: dict = {}
    ws = tea_notebook.Workspace(attack["ws"], embedder="hashing")
    try:
        steps = [call("python_run_python", code=attack["plant"])]
        steps += [call("todo", **action) for action in attack["actions"]]
        steps.append(call("done", success=True, text="planned"))
        script = ScriptedModel(steps)
        agent = ws.agent("planner", model=script.name, envs=["python"], todo=True, tools=[], max_steps=len(steps))
        try:
            result = agent.run_sync("make a plan")
        except Exception as exc:  # a run that ended in error carries its result: report it
            result = getattr(exc, "result", None)
            if result is None:
                raise
        traj = result.trajectory
        report["status"] = result.status
        report["observations"] = [a.get("observation", "") for s in traj.steps for a in s.actions]
        report["prompts"] = json.dumps(script.calls, default=str)
        report["payload"] = json.dumps(payload(traj), default=str)
        report["bundle"] = json.dumps(mimebundle(traj), default=str)
        todo = ws.path / "runs" / result.run_id / "todo.md"
        st = os.lstat(todo) if os.path.lexists(todo) else None
        report["todo_kind"] = None if st is None else stat.S_IFMT(st.st_mode)
        report["todo_text"] = todo.read_text() if st is not None and stat.S_ISREG(st.st_mode) else None
    finally:
        ws.close()
    return report


if __name__ == "__main__":
    main()
