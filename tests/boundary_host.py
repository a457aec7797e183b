"""Play the host for ``test_boundary.py``: start a sandbox as the user this script runs as, run the
given code in it and print what came back as one JSON line. The tests run it as root and as an
unprivileged user, so the same attack meets the boundary from both sides.

    python boundary_host.py '{"folder": "...", "steps": [{"code": "..."}, {"shell": "..."}], "options": {...}}'

Standard library and tea_notebook only (the unprivileged user may have no other interpreter).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path


def main() -> None:
    config = json.loads(sys.argv[1])
    from tea_notebook.envs import boundary
    from tea_notebook.envs.sandbox import PythonSandbox

    report: dict = {"uid": os.getuid(), "euid": os.geteuid(), "python": sys.executable, "results": []}
    if boundary.bubblewrap() is None:
        report["unavailable"] = boundary.fallback_reasons(root_inside=os.geteuid() == 0, isolated=False)
        print(json.dumps(report), flush=True)
        return
    options = {"timeout": 10, "memory_mb": 1024, "processes": 32, "file_mb": 64, "isolation": "bubblewrap"}
    options.update(config.get("options", {}))
    sb = PythonSandbox(Path(config["folder"]), **options)
    if "egress_allow" in config:  # the egress policy this host's workspace would have
        from tea_notebook.egress import EgressPolicy

        sb.egress = EgressPolicy(allow=config["egress_allow"])
    try:
        for step in config["steps"]:
            if "shell" in step:
                result = sb.request("shell", command=step["shell"])
            else:
                result = sb.exec_sync(step["code"])
            report["results"].append(
                {
                    "value": result.value,
                    "stdout": result.stdout,
                    "stderr": result.stderr,
                    "error": result.error,
                    "limit": result.limit,
                    "exit_code": result.exit_code,
                    "notes": result.notes,
                    "text": result.text(),
                }
            )
        report["boundary"] = dataclasses.asdict(sb.boundary) if sb.boundary is not None else None
        report["pids"] = [sb.pid, sb._main]
    finally:
        sb.kill()
        sb._proxy is not None and sb._proxy.close()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
