"""The deep analyzer and the document converter, on real files of every type (tests/docfactory.py).

The model is scripted but honest: a function that dispatches on the stage named in the first line of
the system prompt (``tea-stage: enhance|map|reduce``) and answers the map stage only from the excerpt
it is shown (a finding exists only when the excerpt holds the fact), the reduce stage only from the
findings it is given. A pipeline that loses a chunk, a reference or a file fails these tests.

Conversion runs in the "documents" sandbox session (bubblewrap where available); the converter and
one workspace are shared per module where sharing does not weaken a test (tests that look at the run
folder convert bytes no other test converts, so the cache cannot answer for them).
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import base64  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import docfactory as df  # noqa: E402
import pytest  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.agents.analyzer import _Analysis  # noqa: E402
from tea_notebook.envs import boundary  # noqa: E402
from tea_notebook.envs.documents import DocumentConverter, DocumentError  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.runlog import Process  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
FACT_VALUE = "0.7734"  # the value inside df.LONG_FACT
NOTE_FACT = "The tasting panel rated the Darjeeling first flush 8.6 out of 10."
SECRET = "TOP-SECRET-NOT-ATTACHED-5150"


# -- the scripted analyzer model -------------------------------------------------------------------
_STAGE = re.compile(r"\Atea-stage: (\w+)")
_EXCERPT = re.compile(r'<excerpt ref="([^"]*)">\n(.*)\n</excerpt>', re.S)


def block(text: str, tag: str) -> str:
    """The content of ``<tag>...</tag>`` in a prompt ('' when absent)."""
    m = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    return m.group(1) if m else ""


def text_of(content: Any) -> str:
    """A message's text, whether plain or a list of parts (vision)."""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict) and p.get("type") == "text")


class Analyst:
    """A scripted analyzer model that reads what it is given.

    ``facts``: needle -> finding; the map stage reports a finding only for needles inside its excerpt
    (and claims a wrong reference, which the analyzer must ignore). The reduce stage answers with the
    findings it was given (their references included); it is complete when a finding contains
    ``need`` (default: any finding), else it lists ``missing``. ``focus`` is the enhance stage's
    focus; ``focus_when_missing`` replaces it when the prompt carries a ``<missing>`` block.
    """

    def __init__(
        self,
        facts: dict[str, str],
        *,
        task: str = "Find the facts the person asks about.",
        focus: tuple[str, ...] = (),
        task_when_missing: str | None = None,
        focus_when_missing: tuple[str, ...] | None = None,
        need: str | None = None,
        missing: str = "the value asked for",
        on_call: Any = None,
    ):
        self.facts, self.task, self.focus = facts, task, list(focus)
        self.task_when_missing = task_when_missing or task
        self.focus_when_missing = list(focus_when_missing if focus_when_missing is not None else focus)
        self.need, self.missing, self.on_call = need, missing, on_call
        self.calls: list[tuple[str, str, list[dict]]] = []  # (stage, user text, messages)
        self.model = ScriptedModel(self)

    @property
    def name(self) -> str:
        return self.model.name

    def stage_calls(self, stage: str) -> list[tuple[str, list[dict]]]:
        return [(text, messages) for s, text, messages in self.calls if s == stage]

    def excerpts(self) -> list[tuple[str, str]]:
        """``(ref, text)`` of every excerpt the map stage was shown, in call order."""
        return [_EXCERPT.search(text).groups() for text, _ in self.stage_calls("map")]

    def __call__(self, messages: list[dict], tools: list[dict]) -> str:
        m = _STAGE.match(text_of(messages[0]["content"]))
        assert m, f"the system prompt does not start with the stage: {messages[0]['content'][:80]!r}"
        stage, user = m.group(1), text_of(messages[-1]["content"])
        self.calls.append((stage, user, messages))
        if self.on_call is not None:
            self.on_call(stage, user, messages)
        return json.dumps(getattr(self, stage)(user, messages))

    def enhance(self, user: str, messages: list[dict]) -> dict:
        if "<missing>" in user:
            return {"enhanced_task": self.task_when_missing, "focus": self.focus_when_missing}
        return {"enhanced_task": self.task, "focus": self.focus}

    def map(self, user: str, messages: list[dict]) -> dict:
        found = _EXCERPT.search(user)
        assert found, f"the map prompt has no excerpt: {user[:200]!r}"
        excerpt = found.group(2)
        findings = [
            {"ref": "somewhere-else.pdf, page 999", "finding": finding, "quote": needle}
            for needle, finding in self.facts.items()
            if needle in excerpt
        ]
        return {"findings": findings}

    def reduce(self, user: str, messages: list[dict]) -> dict:
        lines = [ln for ln in block(user, "findings").splitlines() if ln.startswith("(") and ln != "(no findings)"]
        complete = any(self.need in ln for ln in lines) if self.need else bool(lines)
        return {
            "answer": " ".join(lines) if lines else "Nothing found yet.",
            "summary": f"{len(lines)} finding(s).",
            "complete": complete,
            "missing": [] if complete else [self.missing],
        }


HALDEN = {df.LONG_FACT: f"The calibration constant of the Halden array is {FACT_VALUE}"}


# -- fixtures and helpers --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One workspace for the module (hashing embedder)."""
    workspace = tea_notebook.Workspace(tmp_path_factory.mktemp("analyzer") / "ws", embedder="hashing")
    yield workspace
    workspace.close()


@pytest.fixture(scope="module")
def converter(shared):
    return DocumentConverter(shared)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """One real file of every supported type, with known content."""
    folder = tmp_path_factory.mktemp("files")
    made = {
        "pdf": df.pdf(
            folder, ["Alpha: the kiln runs at 412 degrees.", "Beta: the drying room is kept at 31 C.", "Gamma"]
        ),
        "docx": df.docx(
            folder,
            ["The estate lies at 2,100 metres.", "Harvest starts in the second week of March."],
            {0: "Overview", 1: "Harvest"},
            table=[["grade", "price"], ["FTGFOP", "42.5"]],
        ),
        "xlsx": df.xlsx(
            folder, {"Q3": [["item", "qty"], ["oolong", 17]], "Q4 sales": [["item", "qty"], ["matcha", 23]]}
        ),
        "csv": df.csv(folder, [["tea", "caffeine_mg"], ["green", 30], ["black", 47]]),
        "pptx": df.pptx(folder, [("Roadmap", "Open the Kandy shop in May"), ("Budget", "Spend 9,000 on signage")]),
        "html": df.html(folder, "Brewing guide", ["Steep green tea for two minutes.", "Use water at 80 C & below."]),
        "json": df.json(folder, {"estate": "Makaibari", "elevation_m": 1500, "name": "Pu'er — 普洱"}),
        "txt": df.txt(folder, "Plain notes: the blend is 60% Assam, 40% Ceylon.\n"),
        "png": df.png(folder),
    }
    made["zip"] = df.zip_archive(
        folder,
        {
            "reports/kiln.pdf": made["pdf"],
            "numbers.csv": made["csv"],
            "readme.txt": "Archive readme: batch 77.",
            "docs/estate.docx": made["docx"],
            "photo.png": made["png"],
        },
    )
    return made


def sandbox_calls(converter: DocumentConverter, monkeypatch) -> list[str]:
    """Names converted in the sandbox from now on (the converter's sandbox step, spied on)."""
    seen: list[str] = []
    real = converter._in_sandbox

    async def spy(data, name, sha, context):
        seen.append(name)
        return await real(data, name, sha, context)

    monkeypatch.setattr(converter, "_in_sandbox", spy)
    return seen


def uncached(ws, *paths: Path) -> None:
    """Forget earlier conversions of these files' bytes, so this test's conversion really runs."""
    for path in paths:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        for entry in (ws.path / "cache" / "markdown").glob(f"{sha}*.json"):
            entry.unlink()


def mdify_actions(ws, run_id: str) -> list[dict]:
    """The actions of a run's mdify step (step 1), from its stored trajectory."""
    steps = ws.trajectory(run_id).steps
    assert steps and all(a["name"] == "mdify" for a in steps[0].actions), steps[:1]
    return steps[0].actions


def observation_for(actions: list[dict], needle: str) -> str:
    hits = [a["observation"] for a in actions if needle in json.dumps(a["arguments"])]
    assert len(hits) == 1, (needle, actions)
    return hits[0]


def large_files(folder: Path, limit: int = 8 * 2**20) -> list[tuple[str, int]]:
    """Files under ``folder`` larger than ``limit`` bytes (as allocated on disk)."""
    out = []
    for path in folder.rglob("*"):
        try:
            st = path.lstat()
        except OSError:
            continue
        if path.is_file() and not path.is_symlink() and st.st_blocks * 512 > limit:
            out.append((str(path), st.st_blocks * 512))
    return out


def bytes_read_by_this_process() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


# == 1. every type converts, with its sections ======================================================
EXPECTED = {
    # kind, section refs, texts that must come back
    "pdf": (
        "pdf",
        ["page 1", "page 2", "page 3"],
        ["Alpha: the kiln runs at 412 degrees.", "Beta: the drying room is kept at 31 C."],
    ),
    "docx": (
        "docx",
        ["section 'Overview'", "section 'Harvest'"],
        ["# Overview", "The estate lies at 2,100 metres.", "# Harvest", "| FTGFOP | 42.5 |"],
    ),
    "xlsx": ("xlsx", ["sheet 'Q3'", "sheet 'Q4 sales'"], ["| oolong | 17 |", "| matcha | 23 |"]),
    "csv": ("csv", ["whole document"], ["| tea | caffeine_mg |", "| black | 47 |"]),
    "pptx": ("pptx", ["slide 1", "slide 2"], ["Roadmap", "Open the Kandy shop in May", "Spend 9,000 on signage"]),
    "html": (
        "html",
        ["section 'Brewing guide'"],
        ["# Brewing guide", "Steep green tea for two minutes.", "Use water at 80 C & below."],
    ),
    "json": ("json", ["whole document"], ['"estate": "Makaibari"', '"elevation_m": 1500', "Pu'er — 普洱"]),
    "txt": ("text", ["whole document"], ["Plain notes: the blend is 60% Assam, 40% Ceylon."]),
    "png": (
        "image",
        ["whole document"],
        ["Image file image.png (", "Format: PNG, 64 x 48 pixels", f"Text: Description: {df.PNG_TEXT}"],
    ),
}


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_every_type_converts_with_its_sections(converter, files, kind):
    path = files[kind]
    conversion = asyncio.run(converter.convert(path))
    want_kind, refs, texts = EXPECTED[kind]
    assert conversion.name == path.name and conversion.kind == want_kind
    assert [s.ref for s in conversion.sections] == refs
    for text in texts:
        assert text in conversion.markdown, (text, conversion.markdown)
    assert conversion.problems == [] and conversion.members == []
    chunks = conversion.chunks(1000)
    assert {ref for ref, _ in chunks} == {f"{path.name}, {ref}" for ref in refs}


def test_pdf_pages_stay_apart_in_chunks(converter, files):
    chunks = dict(converter.convert_sync(files["pdf"]).chunks(1000))
    assert "kiln" in chunks["document.pdf, page 1"] and "drying" not in chunks["document.pdf, page 1"]
    assert "drying" in chunks["document.pdf, page 2"] and "kiln" not in chunks["document.pdf, page 2"]
    assert chunks["document.pdf, page 3"] == "Gamma"
    assert "\x0c" not in "".join(chunks.values())


def test_png_is_read_by_our_own_image_reader(converter, files):
    conversion = converter.convert_sync(files["png"])
    size = files["png"].stat().st_size
    first, fmt, text = conversion.markdown.splitlines()
    assert first == f"Image file image.png ({size} bytes)"  # our reader's lines, not markitdown's
    assert fmt == "Format: PNG, 64 x 48 pixels"
    assert text == f"Text: Description: {df.PNG_TEXT}"
    other = converter.convert_sync(df.png(files["png"].parent / "other", "Second picture", width=20, height=10))
    assert "Format: PNG, 20 x 10 pixels" in other.markdown and "Description: Second picture" in other.markdown


def test_zip_members_are_converted_with_member_references(converter, files):
    conversion = converter.convert_sync(files["zip"])
    assert conversion.kind == "zip" and conversion.problems == []
    assert conversion.members == ["reports/kiln.pdf", "numbers.csv", "readme.txt", "docs/estate.docx", "photo.png"]
    assert [s.ref for s in conversion.sections] == [
        "reports/kiln.pdf, page 1",
        "reports/kiln.pdf, page 2",
        "reports/kiln.pdf, page 3",
        "numbers.csv",
        "readme.txt",
        "docs/estate.docx, section 'Overview'",
        "docs/estate.docx, section 'Harvest'",
        "photo.png",
    ]
    chunks = dict(conversion.chunks(1000))
    assert "412 degrees" in chunks["archive.zip, reports/kiln.pdf, page 1"]
    assert "31 C" in chunks["archive.zip, reports/kiln.pdf, page 2"]
    assert "| black | 47 |" in chunks["archive.zip, numbers.csv"]
    assert "Archive readme: batch 77." in chunks["archive.zip, readme.txt"]
    assert "2,100 metres" in chunks["archive.zip, docs/estate.docx, section 'Overview'"]
    assert "second week of March" in chunks["archive.zip, docs/estate.docx, section 'Harvest'"]
    assert f"Description: {df.PNG_TEXT}" in chunks["archive.zip, photo.png"]


# == 2. conversion happens in the sandbox ==========================================================
SUBPROCESS_CONVERT = """
import json, sys
sys.path.insert(0, {tests!r})
import docfactory
import tea_notebook
from tea_notebook.envs.documents import DocumentConverter
ws = tea_notebook.Workspace({ws!r}, embedder="hashing")
pdf = docfactory.pdf({files!r}, ["Sandboxed page one.", "Sandboxed page two."])
docx = docfactory.docx({files!r}, ["A paragraph in Word."])
converter = DocumentConverter(ws)
out = [converter.convert_sync(p) for p in (pdf, docx)]
sessions = [[s.environment, s.key, str(s.folder), s.state] for s in ws.envs.sessions()]
report = {{
    "uid": __import__("os").getuid(),
    "markdown": [c.markdown for c in out],
    "refs": [[s.ref for s in c.sections] for c in out],
    "sha": [c.sha256 for c in out],
    "sessions": sessions,
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("markitdown", "pdfminer", "mammoth", "docx")),
}}
ws.close()
print(json.dumps(report))
"""


def _convert_elsewhere(tmp: Path, python: str = sys.executable, **run: Any) -> dict:
    """Convert a PDF and a DOCX in a fresh interpreter (as another user with ``user=``); its report."""
    code = SUBPROCESS_CONVERT.format(tests=str(TESTS), ws=str(tmp / "ws"), files=str(tmp / "files"))
    env = run.pop("env", None) or {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, env=env, **run)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_conversion_runs_in_the_sandbox_not_in_the_calling_process(tmp_path):
    report = _convert_elsewhere(tmp_path)
    assert report["loaded"] == [], f"the host process imported document parsers: {report['loaded']}"
    assert "Sandboxed page one." in report["markdown"][0] and "Sandboxed page two." in report["markdown"][0]
    assert report["refs"][0] == ["page 1", "page 2"] and "A paragraph in Word." in report["markdown"][1]
    [(env, key, folder, state)] = report["sessions"]
    assert (env, key) == ("documents", "interactive")
    if boundary.bubblewrap() is not None:
        assert "bubblewrap" in state and "no network" in state, state
    # the copy that was converted lives in the session's folder, not next to the original
    copy = Path(folder) / "documents" / report["sha"][0][:16] / "document.pdf"
    assert copy.read_bytes() == (tmp_path / "files" / "document.pdf").read_bytes()


def test_analyzer_converts_in_the_runs_documents_session_and_folder(shared, tmp_path):
    unique = f"Run-folder check {uuid.uuid4().hex}: the boiler pressure is 7.25 bar."
    doc = df.pdf(tmp_path, ["Cover page.", unique], name="boiler.pdf")
    during: list[list[tuple[str, str]]] = []

    def watch(stage, user, messages):
        if stage == "enhance":
            during.append([(s.environment, s.key) for s in shared.envs.sessions()])

    analyst = Analyst({"7.25 bar": "The boiler pressure is 7.25 bar"}, on_call=watch)
    analyzer = shared.analyzer("analyzer_folder", model=analyst.name)
    result = analyzer.run_sync("What is the boiler pressure?", files=[str(doc)])
    assert result.success, result.answer
    run_folder = shared.path / "runs" / result.run_id
    # the run's own sandbox session did the work (the module's converter has the interactive one)...
    assert len(during) == 1 and ("documents", result.run_id) in during[0]
    # ...and it ended with the run
    assert all(s.key != result.run_id for s in shared.envs.sessions())
    [copy] = (run_folder / "documents").rglob("boiler.pdf")
    assert copy.read_bytes() == doc.read_bytes()
    [markdown] = (run_folder / "sandbox" / ".documents").glob("*.md")
    assert unique in markdown.read_text()
    assert "(boiler.pdf, page 2) The boiler pressure is 7.25 bar" in result.answer


# == 3. the cache, by content hash =================================================================
def test_cache_by_content_hash(converter, tmp_path, monkeypatch):
    seen = sandbox_calls(converter, monkeypatch)
    pages = [f"Cache probe {uuid.uuid4().hex}.", "Second page: " + "steeping notes " * 400]
    first_path = df.pdf(tmp_path, pages, name="first.pdf")
    started = time.perf_counter()
    first = converter.convert_sync(first_path)
    first_time = time.perf_counter() - started
    assert not first.cached and seen == ["first.pdf"]
    assert (converter.cache_dir / f"{first.sha256}.pdf.json").is_file()

    renamed = tmp_path / "renamed-copy.pdf"
    shutil.copyfile(first_path, renamed)
    started = time.perf_counter()
    again = converter.convert_sync(renamed)
    again_time = time.perf_counter() - started
    assert again.cached and seen == ["first.pdf"]  # no second trip to the sandbox
    assert again.name == "renamed-copy.pdf" and again.markdown == first.markdown and again.sha256 == first.sha256
    assert [s.ref for s in again.sections] == ["page 1", "page 2"]
    assert again_time < first_time / 3, (again_time, first_time)

    # the suffix picks the converter, so it is part of the key
    as_text = tmp_path / "first.txt"
    shutil.copyfile(first_path, as_text)
    assert not converter.convert_sync(as_text).cached and seen[-1] == "first.txt"

    # changed bytes are converted again
    changed = df.pdf(tmp_path, [pages[0], "Second page: a revised note."], name="first.pdf")
    revised = converter.convert_sync(changed)
    assert not revised.cached and revised.sha256 != first.sha256 and seen[-1] == "first.pdf"
    assert "a revised note." in revised.markdown and "steeping notes" not in revised.markdown


# == 4. map-reduce over long documents ==============================================================
@pytest.mark.parametrize(("fmt", "where"), [("md", "section 'Section 26'"), ("pdf", "page 26")])
def test_map_reduce_finds_the_fact_with_its_reference(shared, tmp_path, fmt, where):
    doc = df.long_text_document(tmp_path, fmt=fmt)
    name = doc.name
    total = len(DocumentConverter(shared).convert_sync(doc).chunks(1000))
    analyst = Analyst(
        HALDEN,
        task="Find the calibration constant of the Halden array.",
        focus=("calibration", "Halden"),
    )
    analyzer = shared.analyzer(f"analyzer_long_{fmt}", model=analyst.name, chunk_chars=1000, max_chunks=6, parallel=3)
    result = analyzer.run_sync("What is the calibration constant of the Halden array?", files=[str(doc)])
    assert result.success, result.answer

    excerpts = analyst.excerpts()
    assert total > 60 and len(excerpts) == 6  # several chunks, but only max_chunks of the many
    assert all(len(text) <= 1000 for _, text in excerpts)
    assert [ref for ref, text in excerpts if df.LONG_FACT in text] == [f"{name}, {where}"]
    # the map stage got the enhanced task
    assert all(
        block(text, "task") == "Find the calibration constant of the Halden array."
        for text, _ in analyst.stage_calls("map")
    )
    # the finding carries the chunk's reference, not the one the model claimed
    [reduce_prompt] = [text for text, _ in analyst.stage_calls("reduce")]
    assert block(reduce_prompt, "findings").startswith(f"({name}, {where}) The calibration constant")
    assert "page 999" not in result.answer
    assert FACT_VALUE in result.answer
    assert re.search(r"\*\*References:\*\* (.*)", result.answer).group(1) == f"{name}, {where}"
    steps = result.trajectory.steps
    assert [a["name"] for a in steps[1].actions] == ["enhance", "map", "reduce"]
    assert len(steps) == 2 and "complete: True" in steps[1].actions[2]["observation"]


def test_second_round_reads_unread_chunks_for_what_is_missing(shared, tmp_path):
    doc = df.long_text_document(tmp_path, fmt="md")
    analyst = Analyst(
        HALDEN,
        task="zyzzyva quokka",  # matches nothing: round 1 reads the first chunks, which lack the fact
        task_when_missing="calibration constant Halden array",
        focus_when_missing=("calibration", "Halden"),
        need=FACT_VALUE,
        missing="the calibration constant of the Halden array",
    )
    analyzer = shared.analyzer("analyzer_rounds", model=analyst.name, chunk_chars=1000, max_chunks=5, max_rounds=3)
    result = analyzer.run_sync("What is the calibration constant of the Halden array?", files=[str(doc)])
    assert result.success, result.answer
    assert FACT_VALUE in result.answer and "long.md, section 'Section 26'" in result.answer

    enhance = [text for text, _ in analyst.stage_calls("enhance")]
    assert len(enhance) == 2 and "<missing>" not in enhance[0]
    assert block(enhance[1], "missing") == "- the calibration constant of the Halden array"
    excerpts = analyst.excerpts()
    assert len(excerpts) == 10
    first, second = excerpts[:5], excerpts[5:]
    assert not any(df.LONG_FACT in text for _, text in first)
    assert [ref for ref, text in second if df.LONG_FACT in text] == ["long.md, section 'Section 26'"]
    assert not {text for _, text in first} & {text for _, text in second}  # no chunk is read twice

    steps = result.trajectory.steps
    assert len(steps) == 3  # mdify, round 1, round 2
    assert "complete: False; missing: the calibration constant" in steps[1].actions[2]["observation"]
    assert steps[1].next_goal == "the calibration constant of the Halden array"
    assert "complete: True" in steps[2].actions[2]["observation"]


# == 5. bad inputs ===================================================================================
def test_bad_files_are_observations_and_the_run_goes_on(shared, tmp_path):
    good = df.txt(tmp_path, f"Tasting notes.\n{NOTE_FACT}\n", name="tasting.txt")
    big = tmp_path / "huge.pdf"
    subprocess.run(["truncate", "-s", "200M", str(big)], check=True)  # sparse: nothing to read but zeros
    assert big.stat().st_size == 200 * 2**20
    bad = {
        "corrupt.pdf": (df.corrupt_pdf(tmp_path), "corrupt"),
        "truncated.pdf": (df.corrupt_pdf(tmp_path, "truncated.pdf", kind="truncated"), "corrupt"),
        "encrypted.pdf": (df.encrypted_pdf(tmp_path), "password-protected"),
        "mystery.qzx": (df.unsupported(tmp_path), "the .qzx format is not supported"),
        "huge.pdf": (big, "200 MB is over the analyzer's limit of 50 MB"),
    }
    analyst = Analyst({"8.6 out of 10": "The first flush was rated 8.6/10"})
    analyzer = shared.analyzer("analyzer_bad", model=analyst.name)
    given = [str(p) for p, _ in bad.values()]
    given.insert(2, str(good))
    read_before = bytes_read_by_this_process()
    result = analyzer.run_sync("How was the first flush rated?", files=given)
    read = bytes_read_by_this_process() - read_before
    assert read < 50 * 2**20, f"{read / 2**20:.0f} MB read: the 200 MB file was read before its size was checked"

    assert result.success and "8.6/10" in result.answer and "(tasting.txt, whole document)" in result.answer
    actions = mdify_actions(shared, result.run_id)
    assert len(actions) == len(given)
    assert actions[2]["ok"] and "tasting.txt: text" in actions[2]["observation"]
    could_not = result.answer.split("**Could not read:**", 1)[1]
    for name, (_, why) in bad.items():
        obs = observation_for(actions, name)
        assert obs.startswith(f"Error: {name}: ") and why in obs, obs
        assert name in could_not and why in could_not
    # markitdown's "File conversion failed after 1 attempts:" alone does not say why: the cause is kept
    assert "PDFSyntaxError" in observation_for(actions, "corrupt.pdf")
    # only the readable file reached the model
    assert [ref for ref, _ in analyst.excerpts()] == ["tasting.txt, whole document"]
    assert len(shared.trajectory(result.run_id).steps) == 2


def test_a_binary_document_without_real_text_is_an_error_never_its_bytes(shared, tmp_path):
    """A 'PDF' that is a header and plain text was handed to the model as its text (markitdown's dispatch
    fell back to reading it as text) and the run succeeded; a PDF with no text gave the model nothing."""
    garbage = df.corrupt_pdf(tmp_path, "garbage.pdf", kind="text")
    blank = df.pdf(tmp_path, [""], name="blank.pdf")
    analyst = Analyst({})
    analyzer = shared.analyzer("analyzer_no_text", model=analyst.name)
    result = analyzer.run_sync("What does the report say?", files=[str(garbage), str(blank)])
    assert result.status == "failed" and analyst.calls == []  # nothing was readable: the model was not asked
    actions = mdify_actions(shared, result.run_id)
    assert observation_for(actions, "garbage.pdf").startswith("Error: garbage.pdf: the PDF file is corrupt")
    assert "blank.pdf: the PDF file gave no text" in observation_for(actions, "blank.pdf")
    assert (
        "garbage.pdf: the PDF file is corrupt" in result.answer
        and "blank.pdf: the PDF file gave no text" in result.answer
    )

    good = df.txt(tmp_path, f"Tasting notes.\n{NOTE_FACT}\n", name="tasting.txt")
    analyst = Analyst({"8.6 out of 10": "The first flush was rated 8.6/10"})
    analyzer = shared.analyzer("analyzer_no_text_2", model=analyst.name)
    result = analyzer.run_sync("How was the first flush rated?", files=[str(garbage), str(good)])
    assert result.success and "**Could not read:** garbage.pdf: the PDF file is corrupt" in result.answer
    assert [ref for ref, _ in analyst.excerpts()] == ["tasting.txt, whole document"]
    assert not any("%PDF" in str(messages) for _, _, messages in analyst.calls)


def test_a_converter_that_gives_back_raw_bytes_is_refused_on_the_host(shared, tmp_path):
    """The host's guard behind the converter: a converter that hands back a binary file as text (what
    markitdown's fallback did) is refused, whatever it ran."""
    echo = textwrap.dedent(
        """
        import os

        def convert(path, out, name, limits):
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(path, "rb") as fh:
                text = fh.read().decode("latin-1")
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(text)
            return {"kind": "pdf", "chars": len(text), "problems": [], "members": []}
        """
    )
    raw = DocumentConverter(shared)
    raw._source, raw._hash = echo, hashlib.sha256(echo.encode()).hexdigest()
    garbage = df.corrupt_pdf(tmp_path, "garbage.pdf", kind="text")
    with pytest.raises(DocumentError, match="garbage.pdf: the conversion gave back the file's raw bytes"):
        raw.convert_sync(garbage)
    assert raw.convert_sync(df.txt(tmp_path, "plain words")).markdown.strip() == "plain words"  # text stays text


def test_nothing_readable_fails_without_asking_the_model(shared, tmp_path):
    analyst = Analyst({})
    analyzer = shared.analyzer("analyzer_nothing", model=analyst.name)
    result = analyzer.run_sync("Summarise.", files=[str(df.unsupported(tmp_path)), str(tmp_path / "absent.pdf")])
    assert result.status == "failed" and analyst.calls == []
    assert "No file could be read" in result.answer
    assert "mystery.qzx: the .qzx format is not supported" in result.answer
    assert "absent.pdf: no such file" in result.answer
    steps = shared.trajectory(result.run_id).steps
    assert len(steps) == 1 and [a["ok"] for a in steps[0].actions] == [False, False]


def test_zip_slip_members_are_refused_and_nothing_lands_outside(converter, shared, tmp_path):
    slip = df.zip_slip(tmp_path / "in")
    uncached(shared, slip)
    conversion = converter.convert_sync(slip)
    assert not conversion.cached
    assert conversion.members == ["ok.txt"] and "A harmless member." in conversion.markdown
    assert "zip-slipped" not in conversion.markdown
    assert sorted(conversion.problems) == [
        "../evil.txt: refused, the member name leaves the archive's folder",
        "/abs/evil.txt: refused, the member name leaves the archive's folder",
    ]
    [unpacked] = (shared.path / "sessions").rglob(f"{conversion.sha256}.md.d")
    assert [p.name for p in unpacked.rglob("*")] == ["ok.txt"]
    for folder in (shared.path, tmp_path, unpacked.parent.parent.parent):
        assert not list(folder.rglob("evil.txt")), folder
    assert not Path("/abs/evil.txt").exists()


def test_zip_bomb_member_is_refused_without_inflating(converter, shared, tmp_path):
    bomb = df.zip_bomb(tmp_path)
    assert bomb.stat().st_size < 2**20
    uncached(shared, bomb)
    converter.convert_sync(df.txt(tmp_path, f"warm-up {uuid.uuid4()}"))  # the sandbox is up: time the bomb only
    started = time.perf_counter()
    conversion = converter.convert_sync(bomb)
    elapsed = time.perf_counter() - started
    assert not conversion.cached
    assert conversion.members == [] and conversion.markdown == ""
    assert conversion.problems == ["zeros.txt: 300 MB unpacked is over the limit of 200 MB"]
    assert elapsed < 2.0, f"{elapsed:.1f} s: the member was inflated"
    assert large_files(shared.path) == []
    assert not list((shared.path / "sessions").rglob("zeros.txt"))


def test_hostile_archives_in_an_analyzer_run(shared, tmp_path):
    files = [
        df.zip_slip(tmp_path),
        df.zip_bomb(tmp_path, name="bomb2.zip"),
        df.txt(tmp_path, NOTE_FACT, name="n.txt"),
    ]
    uncached(shared, *files)  # converted in this run's sandbox, not answered from the cache
    analyst = Analyst({"8.6 out of 10": "rated 8.6"})
    result = shared.analyzer("analyzer_zips", model=analyst.name).run_sync("Rating?", files=[str(f) for f in files])
    assert result.success
    actions = mdify_actions(shared, result.run_id)
    slip_obs = observation_for(actions, "slip.zip")
    assert "sections: ok.txt" in slip_obs and "Not read: ../evil.txt: refused" in slip_obs
    assert "zeros.txt: 300 MB unpacked is over the limit of 200 MB" in observation_for(actions, "bomb2.zip")
    assert "slip.zip: /abs/evil.txt: refused" in result.answer.split("**Could not read:**")[1]
    assert sorted(ref for ref, _ in analyst.excerpts()) == ["n.txt, whole document", "slip.zip, ok.txt"]
    run_folder = shared.path / "runs" / result.run_id
    assert not list(run_folder.rglob("evil.txt")) and not list(run_folder.rglob("zeros.txt"))
    assert large_files(run_folder) == []


def test_sub_analyzer_reads_only_what_the_person_attached(ws, tmp_path, monkeypatch):
    attached = df.txt(tmp_path / "mine", f"Panel notes.\n{NOTE_FACT}\n", name="panel.txt")
    outside = tmp_path / "elsewhere"
    not_attached = df.txt(outside, f"{SECRET}: not for the analyzer", name="secret.txt")
    relative = df.txt(tmp_path, f"{SECRET}: relative", name="relative.txt")
    monkeypatch.chdir(tmp_path)
    analyst = Analyst({"8.6 out of 10": "The panel rated the first flush 8.6/10", "Made in the run": "run file"})
    ws.analyzer(model=analyst.name)
    planted: dict[str, Path] = {}
    relayed: list[str] = []

    def planner_brain(messages, tools):
        names = [t["function"]["name"] for t in tools]
        assert "deep_analyzer_agent" in names, names
        if not planted:
            run_folder = ws.path / "runs" / ws.runs(1)[0]["id"]
            run_folder.mkdir(parents=True, exist_ok=True)
            planted["link"] = run_folder / "link.txt"
            planted["link"].symlink_to(not_attached)
            planted["made"] = run_folder / "made.txt"
            planted["made"].write_text("Made in the run by the planner.")
            return call(
                "deep_analyzer_agent",
                task="How was the first flush rated?",
                files=[
                    str(attached),
                    "/etc/passwd",
                    str(not_attached),
                    "relative.txt",
                    str(planted["link"]),
                    str(planted["made"]),
                ],
            )
        relayed.append(text_of(messages[-1]["content"]))
        return call("done", success=True, text="relayed the analyzer's answer")

    planner = ws.planner(["deep_analyzer"], model=ScriptedModel(planner_brain).name)
    result = planner.run_sync("How was the first flush rated?", files=[str(attached)])
    assert result.success, result.answer
    [seen] = relayed  # what the planner read back from its sub-agent
    assert "8.6/10" in seen and "/etc/passwd: refused" in seen

    [sub] = ws.trajectory(result.run_id).children
    assert sub.agent == "deep_analyzer" and sub.parent_id == result.run_id
    actions = sub.steps[0].actions
    assert [a["ok"] for a in actions] == [True, False, False, False, False, True]
    refused = "refused — it is outside the run folder and was not attached to the run by the person"
    assert actions[1]["observation"].startswith(f"Error: /etc/passwd: {refused}")
    assert "pass it in files=[...] when you start the run" in actions[1]["observation"]  # and how to fix it
    assert actions[2]["observation"].startswith(f"Error: {not_attached}: {refused}")
    # a relative path is made absolute against the working folder, then refused like any other
    assert actions[3]["observation"].startswith(f"Error: {relative}: {refused}")
    # the link is followed by the planner's path check and refused by where it leads
    assert actions[4]["observation"].startswith(f"Error: {not_attached}: {refused}")
    assert actions[5]["observation"].startswith("made.txt: text")

    shown = "\n".join(text for _, text in analyst.excerpts())
    assert NOTE_FACT in shown and "Made in the run by the planner." in shown
    assert SECRET not in shown and "root:" not in shown
    assert {ref for ref, _ in analyst.excerpts()} == {"panel.txt, whole document", "made.txt, whole document"}
    # the sub-analyzer converted in the root run's sandbox session and folder
    assert list((ws.path / "runs" / result.run_id / "documents").rglob("panel.txt"))


def test_a_planted_link_is_refused_by_the_beneath_walk(ws, tmp_path):
    secret = df.txt(tmp_path / "outside", SECRET, name="secret.txt")
    analyzer = ws.analyzer("analyzer_walk", model=Analyst({}).name)
    proc = Process(ws, "analyzer_walk", "read", model=analyzer.model)
    run_folder = ws.path / "runs" / proc.run_id
    (run_folder / "sub").mkdir(parents=True)
    (run_folder / "link.txt").symlink_to(secret)
    (run_folder / "sub" / "dirlink").symlink_to(secret.parent, target_is_directory=True)
    (run_folder / "fine.txt").write_text("inside")
    analysis = _Analysis(analyzer, proc, "read", [])
    # the path as a model wrote it, not resolved first: the walk itself must not leave the folder
    for planted in (run_folder / "link.txt", run_folder / "sub" / "dirlink" / "secret.txt"):
        with pytest.raises(DocumentError) as info:
            analysis._read(str(planted))
        message = str(info.value)
        assert message.startswith(f"{planted.name}: ") and SECRET not in message
        assert "refused: it leads outside the run folder (through a symbolic link" in message
    assert analysis._read(str(run_folder / "fine.txt")) == ("fine.txt", b"inside")
    with pytest.raises(DocumentError, match="not an absolute path"):
        analysis._read("fine.txt")


# == 6. images ======================================================================================
def _png_size_from_data_url(url: str) -> tuple[int, int]:
    data = base64.b64decode(url.split(",", 1)[1])
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return struct.unpack(">II", data[16:24])


class Looker(Analyst):
    """Sees the image when one is attached to the map call, else reads the metadata text."""

    def map(self, user: str, messages: list[dict]) -> dict:
        content = messages[-1]["content"]
        images = (
            [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]
            if isinstance(content, list)
            else []
        )
        if images:
            width, height = _png_size_from_data_url(images[0])
            return {"findings": [{"finding": f"saw a {width}x{height} picture", "quote": ""}]}
        meta = re.search(r"Format: PNG, (\d+) x (\d+) pixels", user)
        return (
            {"findings": [{"finding": f"metadata says {meta.group(1)}x{meta.group(2)}", "quote": ""}]}
            if meta
            else {"findings": []}
        )


@pytest.mark.parametrize("vision", [True, None])
def test_images_go_to_the_model_only_with_vision(shared, files, tmp_path, vision):
    # a second picture whose name holds a comma (references are "<name>, <section>")
    other = df.png(tmp_path, "Second picture", name="tea, dawn.png", width=20, height=10)
    looker = Looker({})
    analyzer = shared.analyzer(f"analyzer_vision_{vision}", model=looker.name, vision=vision)
    result = analyzer.run_sync("Describe the pictures.", files=[str(files["png"]), str(other)])
    assert result.success, result.answer
    calls = {_EXCERPT.search(user).group(1): (user, messages) for user, messages in looker.stage_calls("map")}
    assert set(calls) == {"image.png, whole document", "tea, dawn.png, whole document"}
    for (path, size, text), ref in zip(
        [(files["png"], "64x48", df.PNG_TEXT), (other, "20x10", "Second picture")], sorted(calls)
    ):
        user, messages = calls[ref]
        content = messages[-1]["content"]
        assert f"Description: {text}" in user  # the metadata text is always in the excerpt
        if vision:
            assert isinstance(content, list), ref
            [image] = [p for p in content if p.get("type") == "image_url"]
            assert image["image_url"]["url"].startswith("data:image/png;base64,")
            assert base64.b64decode(image["image_url"]["url"].split(",", 1)[1]) == path.read_bytes()
            assert f"({ref}) saw a {size} picture" in result.answer
        else:  # the default with an offline model: text only
            assert isinstance(content, str)
            assert f"({ref}) metadata says {size}" in result.answer
    # enhance and reduce never carry the image
    assert all(isinstance(m[-1]["content"], str) for s, _, m in looker.calls if s != "map")


# == 7. the card rebuilds the analyzer elsewhere ====================================================
def test_card_rebuilds_the_analyzer_in_a_fresh_workspace_object(tmp_path):
    doc = df.long_text_document(tmp_path / "docs", fmt="pdf")
    analyst = Analyst(HALDEN, task="calibration constant Halden", focus=("calibration", "Halden"))
    first = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    first.analyzer(model=analyst.name, chunk_chars=1000, max_chunks=4, max_rounds=2)
    first.close()

    again = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    try:
        assert "deep_analyzer" not in again.live_agents
        card = again.agents.get("deep_analyzer")
        assert card.metadata["kind"] == "analyzer" and card.metadata["config"]["max_chunks"] == 4
        out = again.agents.invoke("deep_analyzer", "What is the calibration constant?", files=[str(doc)])
        assert out.ok, out.error
        assert FACT_VALUE in out.value and "**References:** long.pdf, page 26" in out.value
        assert len(analyst.excerpts()) == 4  # the card's max_chunks, not the default 24
        assert all(len(text) <= 1000 for _, text in analyst.excerpts())  # and its chunk_chars
        [run] = again.runs(5)
        assert run["agent"] == "deep_analyzer" and run["status"] == "success"
    finally:
        again.close()


# == 8. as an ordinary user =========================================================================
def _markitdown_packages() -> set[str]:
    """Top-level entries of site-packages that markitdown (with its installed extras) imports."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen, todo, tops = set(), [("markitdown", True)], set()
    while todo:
        name, root = todo.pop()
        if name.lower().replace("_", "-") in seen:
            continue
        seen.add(name.lower().replace("_", "-"))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in dist.files or []:
            top = file.parts[0]
            if top not in ("..", "bin", "__pycache__") and not top.endswith((".dist-info", ".pth")):
                tops.add(top)
        for line in dist.requires or []:
            req = Requirement(line)
            if root or req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append((req.name, False))
    return tops


def _user_venv(venv: Path, python: str, as_user: dict[str, Any]) -> str:
    """A venv of the ordinary user's own, holding markitdown: its interpreter.

    The sandbox runs ``python -I`` and binds only the interpreter's prefixes, so the PYTHONPATH that
    lends this user the repository's packages (the repository venv's interpreter lives under /root
    here) does not reach it. Packages inside the user's venv do, as on a laptop: they are hard-linked
    from this venv (cheap); a .pth lends the host process the rest (tea_notebook and its needs).
    """
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, cwd=venv.parent, **as_user)
    [site] = venv.glob("lib/python3*/site-packages")
    source = Path(sysconfig.get_paths()["purelib"])
    for top in _markitdown_packages():
        if (source / top).exists():
            subprocess.run(["cp", "-al", str(source / top), str(site)], check=True)
    paths = dict.fromkeys([str(ROOT), str(source), sysconfig.get_paths()["platlib"]])
    (site / "tea_repo.pth").write_text("\n".join(paths) + "\n")
    return str(venv / "bin" / "python")


@pytest.mark.skipif(os.geteuid() != 0, reason="the ordinary-user host is played by a dedicated user, as root")
def test_conversion_as_an_ordinary_user(tmp_path):
    if boundary.bubblewrap() is None:
        pytest.skip("bubblewrap cannot run here")
    import test_boundary

    uid, gid, home = test_boundary.unprivileged_user()
    python, env = test_boundary.user_python(uid, gid, home)
    as_user = {"env": env, "user": uid, "group": gid, "extra_groups": []}
    work = home / f"analyzer-test-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    os.chown(work, uid, gid)
    try:
        if python != sys.executable:
            python = _user_venv(work / "venv", python, as_user)
        report = _convert_elsewhere(work, python, cwd=str(work), **as_user)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert report["uid"] == uid
    assert report["loaded"] == []
    assert report["refs"][0] == ["page 1", "page 2"] and "Sandboxed page two." in report["markdown"][0]
    [(env_name, _, _, state)] = report["sessions"]
    assert env_name == "documents" and "bubblewrap" in state, state


def test_bad_settings_are_refused_before_a_card_is_registered(shared):
    with pytest.raises(ValueError, match="chunk_chars at least 500"):
        shared.analyzer("analyzer_bad_settings", chunk_chars=10)
    assert "analyzer_bad_settings" not in shared.agents
