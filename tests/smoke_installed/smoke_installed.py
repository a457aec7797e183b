"""The package as a user installs it: the wheel, with no extras, in a clean virtualenv.

Run by ``scripts/smoke_wheel.sh`` (part of ``scripts/test.sh``), never by the normal test run: this file is
copied to a folder outside the checkout and run with that virtualenv's Python, so that only the installed
wheel can be imported. The runner installs pytest, ipykernel, nbclient and jupyterlab into that virtualenv
as test tools (``pre-tools-freeze.txt`` records what the wheel alone brought); nothing of tea_notebook's
extras. The model is scripted: the point is that every real component a plain install needs is there.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import docfactory as df
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import tea_notebook  # noqa: E402
from tea_notebook.envs.search import Hit  # noqa: E402
from tea_notebook.models.offline import ScriptedModel  # noqa: E402

VENV = Path(sys.prefix).resolve()
CHECKOUT = Path(os.environ["TEA_SMOKE_CHECKOUT"]).resolve() if os.environ.get("TEA_SMOKE_CHECKOUT") else None
FACT = "The Halden tea garden was planted in 1887 by Ingrid Voss."


def test_the_package_comes_from_the_virtualenv_not_the_checkout():
    where = Path(tea_notebook.__file__).resolve()
    assert where.is_relative_to(VENV), f"tea_notebook imported from {where}, not from the virtualenv {VENV}"
    if CHECKOUT is not None:
        assert not where.is_relative_to(CHECKOUT), f"tea_notebook imported from the checkout: {where}"
        assert all(not Path(p or ".").resolve().is_relative_to(CHECKOUT) for p in sys.path), sys.path
    direct = json.loads(metadata.distribution("tea_notebook").read_text("direct_url.json") or "{}")
    assert direct.get("url", "").endswith(".whl"), f"not installed from a wheel: {direct}"
    assert not direct.get("dir_info", {}).get("editable"), direct


def test_the_test_tools_changed_nothing_the_wheel_installed():
    """pytest, ipykernel, nbclient and jupyterlab (test tools) may add packages, never replace one."""
    frozen = VENV / "pre-tools-freeze.txt"
    key = lambda name: re.sub(r"[-_.]+", "-", name).lower()  # noqa: E731 - PEP 503 normalisation
    lines = frozen.read_text().splitlines()
    before = {key(a): b for a, b in (ln.split("==", 1) for ln in lines if "==" in ln)}
    assert any(re.match(r"tea[-_]notebook @ file:\S+\.whl(#|$)", ln) for ln in lines), lines
    now = {key(d.metadata["Name"]): d.version for d in metadata.distributions()}
    changed = {name: (version, now.get(name)) for name, version in before.items() if now.get(name) != version}
    assert not changed, f"the test tools changed packages of the plain install: {changed}"


def test_tea_help():
    tea = VENV / "bin" / "tea"
    out = subprocess.run([str(tea), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: tea") and "notebooks" in out.stdout and "mcp" in out.stdout, out.stdout
    # `tea notebooks` finds the tutorials the wheel ships
    from tea_notebook.notebooks_job import notebooks_dir

    assert notebooks_dir().resolve().is_relative_to(VENV) and len(list(notebooks_dir().glob("0*.ipynb"))) >= 7


def test_agent_cell_runs_in_a_real_kernel(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    cells = [
        "%load_ext tea_notebook\n%tea workspace ./.tea",
        '%%tool --category math\ndef convert_temperature(value: float, unit: str = "C") -> float:\n'
        '    """Convert a temperature between Celsius and Fahrenheit."""\n'
        '    return value * 9 / 5 + 32 if unit == "C" else (value - 32) * 5 / 9',
        "%%agent calc --tools convert_temperature --max-steps 5 --out result\nWhat is 30 °C in Fahrenheit?",
        "import tea_notebook\nprint('status', result.status)\nprint('answer', result.answer)\n"
        "print('from', tea_notebook.__file__)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    assert "status unverified" in printed and "answer 86.0" in printed, printed  # the demo model, as documented
    assert f"from {VENV}" in printed, printed  # the kernel imported the installed package
    bundles = [o["data"] for o in nb.cells[2].outputs if o.get("output_type") in ("execute_result", "display_data")]
    assert any("application/vnd.tea.trajectory+json" in b and "text/html" in b for b in bundles), bundles
    assert (tmp_path / ".tea" / "tea.db").exists()


# -- the deep researcher, reading a page from a local web server -----------------------------------
class _Pages(http.server.BaseHTTPRequestHandler):
    pages: dict[str, str] = {}

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.pages.get(self.path)
        data = (body or "not found").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def site():
    paragraphs = "".join(
        f"<p>{s}</p>"
        for s in (
            "The estate lies on the northern slope above the river, where the morning fog keeps the leaves tender.",
            FACT,
            "Today the garden produces a first flush that is sold at the village market every spring.",
        )
    )
    _Pages.pages = {
        "/halden.html": f"<html><head><title>Halden tea garden</title></head><body><article>"
        f"<h1>The Halden tea garden</h1>{paragraphs}</article></body></html>"
    }
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class OnePageEngine:
    """A search engine whose only hit is the local page."""

    name = "local"

    def __init__(self, url: str = ""):
        self.url = url

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return [Hit(self.url, "The Halden tea garden", "history of the estate", self.name)]


def _stage(messages: list[dict]) -> str:
    return re.match(r"tea-stage: (\w+)", messages[0]["content"]).group(1)


def honest_researcher(messages: list[dict], tools: list[dict]) -> str:
    """A scripted researcher model that states a fact only when the page text it was shown holds it."""
    stage, user = _stage(messages), messages[-1]["content"]
    if stage == "plan":
        return json.dumps({"reasoning": "one query", "queries": ["Halden tea garden history"]})
    if stage == "select":
        return json.dumps({"reasoning": "the only hit", "read": [1]})
    if stage == "extract":
        found = re.search(r'<source number="(\d+)"[^>]*>\n(.*?)\n</source>', user, re.S)
        evidence = []
        if found and FACT in " ".join(found.group(2).split()):
            evidence = [{"source": int(found.group(1)), "fact": FACT, "quote": FACT, "relevance": 1.0}]
        return json.dumps({"evidence": evidence})
    known = FACT in user
    if stage == "check":
        return json.dumps(
            {
                "summary": f"{FACT} [1]" if known else "nothing yet",
                "answered": known,
                "answer": "1887" if known else "",
                "confidence": "high" if known else "low",
                "gaps": [] if known else ["when the garden was planted"],
                "next_queries": [],
            }
        )
    return json.dumps(
        {
            "answer": "1887" if known else "unknown",
            "report": f"{FACT} [1]" if known else "Nothing found.",
            "confidence": "high" if known else "low",
        }
    )


def test_researcher_reads_a_page_from_a_local_server(tmp_path, site):
    ws = tea_notebook.Workspace(tmp_path / ".tea")
    try:
        ws.egress.allow(site)  # loopback is refused unless allowed
        model = ScriptedModel(honest_researcher)
        engine = OnePageEngine(f"http://{site}/halden.html")
        result = ws.researcher(engines=[engine], model=model.name, max_rounds=1, page_timeout=10).run_sync(
            "When was the Halden tea garden planted?"
        )
        reads = [a for s in result.trajectory.steps for a in s.actions if a["name"] == "read"]
        assert any(FACT in " ".join(str(a.get("observation")).split()) for a in reads), reads  # the page's text
        assert result.status == "success", result.answer
        assert result.answer.startswith("**Answer:** 1887") and engine.url in result.answer, result.answer
    finally:
        ws.close()


# -- the deep analyzer, converting files it makes -----------------------------------------------------
def honest_analyst(messages: list[dict], tools: list[dict]) -> str:
    """A scripted analyzer model that reports a finding only when the excerpt it was shown holds it."""
    stage, user = _stage(messages), messages[-1]["content"]
    if stage == "enhance":
        return json.dumps({"enhanced_task": "Find the year the garden was planted.", "focus": ["planted"]})
    if stage == "map":
        excerpt = re.search(r'<excerpt ref="[^"]*">\n(.*)\n</excerpt>', user, re.S).group(1)
        found = "planted in 1887" in " ".join(excerpt.split())
        return json.dumps({"findings": [{"ref": "?", "finding": FACT, "quote": "planted in 1887"}] if found else []})
    lines = [ln for ln in user.split("<findings>", 1)[-1].splitlines() if ln.startswith("(")]
    return json.dumps(
        {
            "answer": " ".join(lines) or "nothing",
            "summary": f"{len(lines)} findings",
            "complete": bool(lines),
            "missing": [],
        }
    )


def test_analyzer_converts_pdf_docx_and_xlsx(tmp_path):
    files = [
        df.pdf(tmp_path, ["Estate history.", f"Page two. {FACT}"], name="history.pdf"),
        df.docx(tmp_path, ["Field notes.", FACT], table=[["Field", "Yield"], ["South", 17]], name="notes.docx"),
        df.xlsx(tmp_path, {"Harvest": [["Field", "Yield"], ["North", 42]]}, name="harvest.xlsx"),
    ]
    ws = tea_notebook.Workspace(tmp_path / ".tea")
    try:
        converted = {}
        analyzer = ws.analyzer(model=ScriptedModel(honest_analyst).name, max_rounds=1)
        for path in files:
            conversion = analyzer.converter.convert_sync(path)
            converted[path.name] = conversion.markdown
        assert "planted in 1887" in " ".join(converted["history.pdf"].split()), converted["history.pdf"]
        assert "# Overview" in converted["notes.docx"] and "planted in 1887" in converted["notes.docx"]
        assert "| South | 17 |" in converted["notes.docx"], converted["notes.docx"]
        assert "Harvest" in converted["harvest.xlsx"] and "42" in converted["harvest.xlsx"], converted["harvest.xlsx"]
        result = analyzer.run_sync("When was the garden planted?", files=[str(p) for p in files])
        assert result.status == "success", result.answer
        assert "1887" in result.answer, result.answer
    finally:
        ws.close()


def test_the_jupyterlab_extension_is_installed_and_enabled():
    jupyter = VENV / "bin" / "jupyter"
    out = subprocess.run([str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=120)
    listing = out.stdout + out.stderr
    assert out.returncode == 0, listing
    line = next((ln for ln in listing.splitlines() if "tea-notebook-jupyterlab" in ln), None)
    assert line is not None, listing
    assert "enabled" in line and "OK" in line, line
    shipped = VENV / "share" / "jupyter" / "labextensions" / "tea-notebook-jupyterlab"
    assert (shipped / "package.json").is_file() and list((shipped / "static").glob("*.js")), shipped
    assert str(shipped.parent) in listing  # listed from the virtualenv the wheel installed into
