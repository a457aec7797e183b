"""The ``tea_notebook.cells`` comm in a real kernel (issue 29), with this test as the JupyterLab page:
it opens the comm as the extension does, answers the kernel's requests, receives the proposal, clicks
Run (a decision with the cell's source), executes the inserted cell as the notebook does (an execute
request carrying ``metadata.cellId``) and reports it ``executed``. The agent waits in its background
thread while the kernel's main thread handles the comm; the run ends done with the cell's output as its
observation, and the page is told the proposal ``settled``."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from kernel_driver import make_kernel_specs, start_kernel  # noqa: E402

pytestmark = pytest.mark.slow


def comm_messages(kc: Any, until: Any, timeout: float = 30) -> list[dict[str, Any]]:
    """The ``tea_notebook.cells`` comm messages from the kernel (their data), until ``until(data)``."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.2)
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting
            continue
        if msg["msg_type"] == "comm_msg":
            data = msg["content"]["data"]
            seen.append(data)
            if until(data):
                return seen
    raise AssertionError(f"no awaited comm message within {timeout} s: {seen}")


def test_a_proposal_through_the_comm_in_a_real_kernel(tmp_path):
    k = start_kernel(make_kernel_specs(tmp_path / "kernels"), tmp_path)
    try:
        kc = k.kc
        k.ok("%load_ext tea_notebook")
        k.workspace(tmp_path / "ws")
        k.ok("%config TeaMagics.live = False")
        k.ok(
            "from tea_notebook.models.offline import ScriptedModel, call\n"
            "ScriptedModel([call('notebook_list_cells'),"
            " call('notebook_propose_cell', code='answer = 6 * 7\\nprint(answer)', explanation='compute'),"
            " call('done', success=True, text='42')], name='labpage')"
        )
        comm_id = uuid.uuid4().hex

        def to_kernel(data: dict[str, Any]) -> None:
            kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))

        opening = {"comm_id": comm_id, "target_name": "tea_notebook.cells", "data": {"hello": 1, "notebook": "t.ipynb"}}
        kc.shell_channel.send(kc.session.msg("comm_open", opening))
        k.send("%%agent labpage --cells --model tea/script:labpage --out job\ncompute the answer")

        request = comm_messages(kc, lambda d: d.get("type") == "cells_request")[-1]
        cells = [{"id": "agent-cell", "index": 0, "cell_type": "code", "source": "%%agent labpage ...",
                  "execution_count": 1, "outputs": [], "tea": None}]  # fmt: skip
        to_kernel({"type": "cells", "id": request["id"], "cells": cells})

        proposal = comm_messages(kc, lambda d: d.get("type") == "proposal")[-1]
        p = proposal["proposal"]
        assert p["kind"] == "new" and p["code"] == "answer = 6 * 7\nprint(answer)" and p["needs_grant"] is True
        assert p["mode"] == "ask" and p["explanation"] == "compute" and p["agent"] == "labpage" and p["run"]
        assert isinstance(proposal["t_kernel"], float)
        to_kernel({"type": "shown", "proposal": p["id"], "cell_id": "inserted-cell", "t_page": 1.0})
        to_kernel({"type": "decision", "proposal": p["id"], "decision": "run", "source": p["code"]})
        run = kc.session.msg(
            "execute_request",
            {"code": p["code"], "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False},
            metadata={"cellId": "inserted-cell"},
        )
        kc.shell_channel.send(run)
        outputs = [{"output_type": "stream", "name": "stdout", "text": "42\n"}]
        to_kernel(
            {"type": "executed", "proposal": p["id"], "cell_id": "inserted-cell", "execution_count": 5,
             "ok": True, "outputs": outputs}
        )  # fmt: skip
        settled = comm_messages(kc, lambda d: d.get("type") == "settled")[-1]
        assert settled == {"type": "settled", "proposal": p["id"], "status": "ran"}

        done = k.json(
            "(lambda r: [r.status, [a['observation'] for s in r.trajectory.steps for a in s.actions"
            " if a['name'] == 'notebook_propose_cell'][0], answer])(job.result(timeout=30))"
        )
        status, observation, answer = done
        assert status == "success" and answer == 42
        seen = json.loads(observation)
        assert seen["decision"] == "ran" and seen["outputs"] == "42" and seen["cell_id"] == "inserted-cell"
    finally:
        k.close()
