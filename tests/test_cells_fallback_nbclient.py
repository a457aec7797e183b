"""The agent's cells without the JupyterLab extension (issue 29): a real notebook executed top to bottom
by nbclient in a real kernel, the way papermill, nbval and CI run notebooks, with scripted models.

An agent started with ``%%agent NAME --cells`` reads the cell holding a small table and proposes a
cleaning cell; the next cell approves it with one line edited (``%%tea approve p1`` + code); the
cell's output goes back to the model and the run ends done. A rejected proposal never runs (its
side-effect file stays absent). ``%tea fix`` on a cell that raised KeyError proposes an edit that is
approved, and the fixed code then succeeds."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

from jupyter_client import KernelManager  # noqa: E402
from kernel_driver import KERNEL, make_kernel_specs  # noqa: E402

pytestmark = pytest.mark.slow

TABLE = "rows = [{'city': ' Paris ', 'temp': '21'}, {'city': 'Lyon', 'temp': None}]\nrows"
PROPOSED = "clean = [dict(r, city=r['city'].strip()) for r in rows if r['temp'] is not None]\nprint(clean)"
EDITED = "clean = [dict(r, city=r['city'].strip()) for r in rows if r['temp'] is not None]\nprint(len(clean), 'clean')"


def code(source: str, *tags: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(textwrap.dedent(source).strip())
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def notebook(tmp_path: Path) -> nbformat.NotebookNode:
    marker = tmp_path / "side-effect.txt"
    cells = [
        code(f"%load_ext tea_notebook\n%tea workspace {tmp_path / 'ws'}\n%config TeaMagics.live = False"),  # In[1]
        code(  # In[2]
            f"""
            import json, os
            from tea_notebook.models.offline import ScriptedModel, call
            ScriptedModel([
                call("notebook_list_cells"),
                call("notebook_read_cell", cell_id="In[3]"),
                call("notebook_propose_cell", code={PROPOSED!r}, explanation="drop rows without a temperature"),
                call("done", success=True, text="cleaned"),
            ], name="analyst")
            ScriptedModel([
                call("notebook_propose_cell", code="open({str(marker)!r}, 'w').write('ran')"),
                call("done", success=False, text="the person said no"),
            ], name="toucher")
            ScriptedModel([
                call("notebook_read_cell", cell_id="In[10]"),
                call("notebook_propose_edit", cell_id="In[10]", code="totals = {{'a': 1}}\\ntotals.get('b', 0)"),
                call("done", success=True, text="fixed"),
            ], name="fixer")
            MARKER = {str(marker)!r}
            """
        ),
        code(TABLE),  # In[3]: the table
        code("%%agent analyst --cells --model tea/script:analyst --out job\nclean the rows table"),  # In[4]
        code(f"%%tea approve p1\n{EDITED}"),  # In[5]: the person's edit of one line
        code(  # In[6]
            """
            result = job.result(timeout=60)
            [proposed] = [a for s in result.trajectory.steps for a in s.actions if a["name"] == "notebook_propose_cell"]
            print(json.dumps({"status": result.status, "seen": json.loads(proposed["observation"]), "clean": clean,
                              "events": [e.type for e in result.trajectory.events if e.type.startswith("cell_")]}))
            """
        ),
        code("%%agent toucher --cells --model tea/script:toucher --out job2\nwrite the file"),  # In[7]
        code("%tea reject p2 not in this notebook"),  # In[8]
        code(  # In[9]
            """
            result2 = job2.result(timeout=60)
            [rejected] = [a for s in result2.trajectory.steps for a in s.actions if a["name"] != "done"]
            print(json.dumps({"status": result2.status, "seen": json.loads(rejected["observation"]),
                              "exists": os.path.exists(MARKER)}))
            """
        ),
        code("totals = {'a': 1}\ntotals['b']", "raises-exception"),  # In[10]: fails with KeyError
        code("%tea fix --model tea/script:fixer"),  # In[11]
        code("%tea approve p3"),  # In[12]: the fix, as proposed
        code(  # In[13]
            """
            fixed = Out[11]
            result3 = fixed.result(timeout=60)
            acts = [a for s in result3.trajectory.steps for a in s.actions]
            print(json.dumps({"status": result3.status, "task": result3.trajectory.task,
                              "seen": json.loads(acts[1]["observation"]), "read": acts[0]["observation"]}))
            """
        ),
        code("%tea proposals"),  # In[14]
    ]
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": KERNEL, "display_name": KERNEL}})


def printed(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def test_the_fallback_end_to_end_in_a_real_kernel(tmp_path, monkeypatch):
    specs = make_kernel_specs(tmp_path / "kernels")
    monkeypatch.delenv("TEA_MODEL", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    nb = notebook(tmp_path)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    client = nbclient.NotebookClient(nb, km=km, timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    cells = nb.cells
    # the approving cell says what it runs, then runs the person's edit; its output goes to the model
    # (the proposal itself is printed by the agent's run into the %%agent cell: a live front end shows it
    # there, nbclient has moved on by then)
    assert printed(cells[4]) == "── proposal p1 (new, agent analyst): running your edit of it\n1 clean\n"
    first = json.loads(printed(cells[5]))
    assert first["status"] == "success" and first["clean"] == [{"city": "Paris", "temp": "21"}]
    seen = first["seen"]
    assert seen["decision"] == "edited and ran" and seen["outputs"] == "1 clean" and seen["cell_id"] == "In[5]"
    assert seen["code"] == EDITED and seen["error"] is None
    assert first["events"] == ["cell_proposed", "cell_decided", "cell_ran"]
    # the rejected proposal never ran
    second = json.loads(printed(cells[8]))
    assert second["exists"] is False and second["status"] == "failed"
    assert second["seen"]["decision"] == "rejected" and second["seen"]["note"] == "not in this notebook"
    assert "proposal p2 rejected" in "".join(str(o.get("data", {})) for o in cells[7].outputs)
    # %tea fix: the failing cell, its traceback and its names went to the agent; the approved edit succeeded
    assert any(o.output_type == "error" and o.ename == "KeyError" for o in cells[9].outputs)
    third = json.loads(printed(cells[12]))
    assert third["status"] == "success"
    assert "Cell In[10] of the notebook failed with KeyError: 'b'" in third["task"]
    assert "totals: dict, len 1" in third["task"] and "notebook_propose_edit" in third["task"]
    assert third["seen"]["decision"] == "ran" and third["seen"]["outputs"] == "0" and third["seen"]["error"] is None
    assert "totals['b']" in third["read"] and "KeyError" in third["read"]
    assert "0" in str(cells[11].outputs)
    assert "no proposal is waiting" in str(cells[13].outputs)
