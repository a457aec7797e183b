"""Test-wide settings: litellm must never try to download its price list (no network in CI)."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("TEA_MODEL", None)  # tests choose their models explicitly


import pytest  # noqa: E402

import tea_notebook  # noqa: E402


@pytest.fixture
def ws(tmp_path):
    """A fresh workspace with the (fast, lexical) hashing embedder."""
    workspace = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    yield workspace
    workspace.close()


@pytest.fixture(scope="session")
def warm_litellm(tmp_path_factory):
    """Import litellm and register the offline provider once."""
    from tea_notebook.models.offline import ScriptedModel, call

    w = tea_notebook.Workspace(tmp_path_factory.mktemp("warm") / "ws", embedder="hashing")
    script = ScriptedModel([call("done", success=True, text="warm")])
    assert w.agent("warm", model=script.name, tools=[]).run_sync("warm up").success
    w.close()
