"""The workspace folder on disk: tea.db (SQLite, WAL), vectors/ files, reopening, several
processes, and refusing databases that are not ours.

Everything here uses real SQLite files and real child processes (``sys.executable``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from child_processes import run_released_together
from workspace_on_disk import make_ws, sha256_file

import tea_notebook
from tea_notebook.errors import WorkspaceError
from tea_notebook.protocol.records import ToolRecord

REPO = Path(__file__).resolve().parents[1]


# -- helpers ------------------------------------------------------------------------------
def run_py(code: str, *args: str, cwd: Path | None = None, timeout: float = 180) -> str:
    """Run a python script in a fresh interpreter; fail the test with its stderr if it fails."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"child failed (rc={proc.returncode}):\n{proc.stderr}"
    return proc.stdout


CATALOG = [
    ("read_file", "Read a text file from disk and return its content", "files"),
    ("write_file", "Write text content to a file on disk", "files"),
    ("web_search", "Search the web for pages matching a query", "web"),
    ("fetch_url", "Download a web page at a URL and return its HTML", "web"),
    ("send_email", "Send an email message to a recipient address", "mail"),
    ("resize_image", "Resize an image to a given width and height in pixels", "images"),
    ("translate_text", "Translate text from one language to another", "language"),
    ("currency_convert", "Convert an amount of money between currencies", "finance"),
]


def fill(ws: tea_notebook.Workspace) -> None:
    for name, desc, cat in CATALOG:
        ws.tools.register(ToolRecord(name=name, description=desc, category=cat))


def index_header(faiss_file: Path) -> dict:
    """The JSON header line of a saved vector index (after the magic line)."""
    lines = faiss_file.read_bytes().split(b"\n", 2)
    assert lines[0] == b"TEAVEC1"
    return json.loads(lines[1])


def hits(ws: tea_notebook.Workspace, query: str, mode: str = "hybrid", k: int = 5):
    return [(h.name, round(h.score, 5)) for h in ws.tools.search(query, k=k, mode=mode)]


def add_numbers(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


QUERIES = ["download the HTML at a URL", "write text to a file", "money currencies", "resize picture"]


# -- the folder -----------------------------------------------------------------------------
def test_folder_holds_wal_database_and_vector_files_after_search(tmp_path):
    ws = make_ws(tmp_path / "ws")
    fill(ws)
    db = tmp_path / "ws" / "tea.db"
    assert db.is_file()
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()
    assert meta["format"] == "tea_notebook"
    assert meta["schema_version"] == "1"
    assert meta["embedder"] == "hashing:256"

    vec_dir = tmp_path / "ws" / "vectors"
    assert not vec_dir.exists() or not list(vec_dir.glob("*.faiss"))
    assert ws.tools.search("download the HTML at a URL", k=2)[0].name == "fetch_url"
    faiss_files = list(vec_dir.glob("*.faiss"))
    assert len(faiss_files) == 1 and faiss_files[0].stat().st_size > 0
    side = index_header(faiss_files[0])
    assert side["dim"] == 256
    assert side["seq"] == len(CATALOG)  # one change-log entry per registration
    ws.close()


def test_reopen_in_new_process_sees_records_versions_and_usage(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path)
    fill(ws)
    ws.tools.register(add_numbers)
    ws.tools.register(ToolRecord(name="read_file", description="Read a whole text file", category="files"))
    ws.tools.register(ToolRecord(name="read_file", description="Read a text file, any encoding", category="files"))
    ws.tools.rollback("read_file", 2)
    assert ws.tools.invoke("add_numbers", {"a": 2, "b": 3}).value == 5
    assert ws.tools.invoke("add_numbers", {"a": 10, "b": -4}).value == 6
    assert ws.tools.invoke("add_numbers", {"a": "x"}).ok is False  # schema failure is counted
    ws.tools.unregister("send_email")

    expected = {
        rec.name: {
            "content": rec.content(),
            "version": rec.version,
            "usage": [rec.usage.calls, rec.usage.failures],
            "versions": [[v.version, v.hash, v.note, v.current] for v in ws.tools.versions(rec.name)],
        }
        for rec in ws.tools.list()
    }
    assert expected["add_numbers"]["usage"] == [3, 1]
    assert expected["read_file"]["version"] == 2
    assert [v[3] for v in expected["read_file"]["versions"]] == [False, True, False]
    assert "send_email" not in expected
    ws.close()

    out = run_py(
        """
        import json, sys
        import tea_notebook
        ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")
        state = {
            rec.name: {
                "content": rec.content(),
                "version": rec.version,
                "usage": [rec.usage.calls, rec.usage.failures],
                "versions": [[v.version, v.hash, v.note, v.current] for v in ws.tools.versions(rec.name)],
            }
            for rec in ws.tools.list()
        }
        # the child can also run the stored (trusted) source and adds to the shared statistics
        res = ws.tools.invoke("add_numbers", {"a": 20, "b": 22})
        print(json.dumps({"state": state, "sum": res.value, "ok": res.ok,
                          "search": [h.name for h in ws.tools.search("download the HTML at a URL", k=1)]}))
        """,
        path,
    )
    child = json.loads(out)
    assert child["state"] == expected
    assert child["ok"] is True and child["sum"] == 42
    assert child["search"] == ["fetch_url"]

    again = make_ws(path)
    usage = again.tools.get("add_numbers").usage
    assert (usage.calls, usage.failures) == (4, 1)
    assert usage.last_used is not None
    again.close()


# -- vectors/ is a cache ------------------------------------------------------------------
def _damage(vec_dir: Path, how: str) -> None:
    faiss_file = next(vec_dir.glob("*.faiss"))
    data = faiss_file.read_bytes()
    magic, header, body = data.split(b"\n", 2)
    rng = random.Random(1234)
    if how == "delete_folder":
        shutil.rmtree(vec_dir)
    elif how == "delete_index_file":
        faiss_file.unlink()
    elif how == "bit_flip_in_vectors":
        flipped = bytearray(body)
        flipped[len(body) // 2] ^= 0x01
        faiss_file.write_bytes(magic + b"\n" + header + b"\n" + bytes(flipped))
    elif how == "random_bytes":
        faiss_file.write_bytes(rng.randbytes(len(data)))
    elif how == "truncated":
        faiss_file.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        faiss_file.write_bytes(b"")
    elif how == "garbled_header":
        faiss_file.write_bytes(data[:4] + rng.randbytes(40) + data[44:])
    elif how == "header_not_json":
        faiss_file.write_bytes(magic + b"\n{not json\n" + body)
    elif how == "header_wrong_dim":
        head = json.loads(header)
        head["dim"] = 17
        faiss_file.write_bytes(magic + b"\n" + json.dumps(head).encode() + b"\n" + body)
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "delete_folder",
        "delete_index_file",
        "bit_flip_in_vectors",
        "random_bytes",
        "truncated",
        "empty",
        "garbled_header",
        "header_not_json",
        "header_wrong_dim",
    ],
)
def test_damaged_vector_files_are_rebuilt_from_database(tmp_path, how):
    path = tmp_path / "ws"
    ws = make_ws(path)
    fill(ws)
    before = {q: (hits(ws, q), hits(ws, q, mode="semantic")) for q in QUERIES}
    ws.close()

    _damage(path / "vectors", how)

    ws = make_ws(path)
    after = {q: (hits(ws, q), hits(ws, q, mode="semantic")) for q in QUERIES}
    assert after == before
    assert after["download the HTML at a URL"][1][0][0] == "fetch_url"
    # the index file was written again and is whole
    faiss_file = next((path / "vectors").glob("*.faiss"))
    side = index_header(faiss_file)
    assert side["dim"] == 256 and side["seq"] == len(CATALOG)
    ws.close()

    # a third opening loads the rewritten file (no rebuild needed) and still agrees
    ws = make_ws(path)
    assert {q: (hits(ws, q), hits(ws, q, mode="semantic")) for q in QUERIES} == before
    ws.close()


def test_damaged_vector_payload_is_detected(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path)
    fill(ws)
    before = {q: hits(ws, q, mode="semantic") for q in QUERIES}
    ws.close()
    faiss_file = next((path / "vectors").glob("*.faiss"))
    data = bytearray(faiss_file.read_bytes())
    # zero the middle of the file: that is the float payload (headers at the start, ids at the end)
    data[200 : len(data) - 400] = bytes(len(data) - 600)
    faiss_file.write_bytes(bytes(data))
    ws = make_ws(path)
    after = {q: hits(ws, q, mode="semantic") for q in QUERIES}
    ws.close()
    assert after == before


# -- several Workspace objects in one process ----------------------------------------------
def test_workspaces_on_different_paths_are_isolated(tmp_path):
    a = make_ws(tmp_path / "a")
    b = make_ws(tmp_path / "b")
    a.tools.register(ToolRecord(name="only_in_a", description="Compress files into a zip archive"))
    b.tools.register(ToolRecord(name="only_in_b", description="Play a sound file through the speakers"))
    assert a.tools.names() == ["only_in_a"]
    assert b.tools.names() == ["only_in_b"]
    assert "only_in_b" not in a.tools and "only_in_a" not in b.tools
    assert [h.name for h in a.tools.search("play a sound file", k=5)] == ["only_in_a"]
    assert [h.name for h in b.tools.search("compress a zip archive", k=5)] == ["only_in_b"]
    assert [r.name for r in a.tools.list()] == ["only_in_a"]
    assert len(a.tools) == 1 and len(b.tools) == 1
    a.close()
    b.close()


def test_two_workspace_objects_on_same_path_follow_change_log(tmp_path):
    path = tmp_path / "ws"
    a = make_ws(path)
    b = make_ws(path)
    fill(a)
    # b has built its in-memory indexes (keyword, vectors, records) before a changes anything
    assert [h.name for h in b.tools.search("download the HTML at a URL", k=1)] == ["fetch_url"]
    assert len(b.tools.list()) == len(CATALOG)

    a.tools.register(ToolRecord(name="transcribe_audio", description="Transcribe spoken audio recordings into text"))
    assert "transcribe_audio" in [r.name for r in b.tools.list()]
    for mode in ("hybrid", "semantic", "keyword"):
        assert b.tools.search("transcribe audio recordings", k=1, mode=mode)[0].name == "transcribe_audio"

    # a new version: b sees the new description in list, get and search
    a.tools.register(
        ToolRecord(name="send_email", description="Post a chat notification to a team channel", category="mail")
    )
    listed = {r.name: r for r in b.tools.list()}
    assert listed["send_email"].description == "Post a chat notification to a team channel"
    assert listed["send_email"].version == 2
    assert b.tools.search("chat notification team channel", k=1, mode="semantic")[0].name == "send_email"

    # rollback and unregister through a are seen by b
    a.tools.rollback("send_email", 1)
    assert {r.name: r for r in b.tools.list()}["send_email"].description.startswith("Send an email")
    a.tools.unregister("transcribe_audio")
    assert "transcribe_audio" not in b.tools.names()
    assert "transcribe_audio" not in [h.name for h in b.tools.search("transcribe audio recordings", k=10)]
    assert len(b.tools) == len(CATALOG)

    # and the other direction
    b.tools.register(ToolRecord(name="from_b", description="Render a chart from tabular numbers"))
    assert a.tools.search("render chart tabular numbers", k=1)[0].name == "from_b"
    a.close()
    b.close()


# -- several processes -----------------------------------------------------------------------
_WRITER = """
import os, sys, time
from tea_notebook.workspace import Workspace
from tea_notebook.protocol.records import ToolRecord
path, worker, gate, n, search = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
ws = Workspace(path, embedder="hashing")
deadline = time.time() + 60
while not os.path.exists(gate):
    if time.time() > deadline:
        sys.exit("gate never opened")
    time.sleep(0.002)
for i in range(n):
    ws.tools.register(ToolRecord(name="shared", description=f"shared tool revision {i} written by worker {worker}"))
    if i % 10 == 0:
        ws.tools.register(ToolRecord(name=f"w{worker}_tool_{i}", description=f"private tool {i} of worker {worker}"))
    if search:
        ws.tools.search(f"revision {i} worker {worker}", k=3)
ws.close()
"""


def _run_writers(path: Path, workers: int, n: int, search: bool = False) -> list[subprocess.CompletedProcess]:
    gate = path.parent / "go"
    argvs = [
        [sys.executable, "-c", _WRITER, str(path), str(w), str(gate), str(n), "1" if search else "0"]
        for w in range(workers)
    ]
    # let every child import and open the workspace, then release them together
    return run_released_together(argvs, gate, settle=1.0, timeout=240, cwd=REPO)


def _check_no_lost_versions(path: Path, workers: int, n: int) -> None:
    ws = make_ws(path)
    versions = [v.version for v in ws.tools.versions("shared")]
    assert versions == list(range(1, workers * n + 1))
    descriptions = {ws.tools.get("shared", version=v).description for v in versions}
    assert descriptions == {f"shared tool revision {i} written by worker {w}" for w in range(workers) for i in range(n)}
    assert ws.tools.get("shared").version == workers * n
    private = {f"w{w}_tool_{i}" for w in range(workers) for i in range(0, n, 10)}
    assert set(ws.tools.names()) == private | {"shared"}
    assert all(ws.tools.get(name).version == 1 for name in private)
    ws.close()
    con = sqlite3.connect(path / "tea.db")
    try:
        changes = con.execute("SELECT count(*) FROM changes WHERE name='shared' AND op='register'").fetchone()[0]
        stored = con.execute("SELECT count(*) FROM versions").fetchone()[0]
    finally:
        con.close()
    assert changes == workers * n
    assert stored == workers * n + len(private)


@pytest.mark.slow
def test_concurrent_processes_registering_lose_no_versions(tmp_path):
    path = tmp_path / "ws"
    make_ws(path).close()  # an existing workspace that several notebooks then write into
    workers, n = 3, 100
    results = _run_writers(path, workers, n, search=False)
    for r in results:
        assert r.returncode == 0, r.stderr
    _check_no_lost_versions(path, workers, n)


_SEARCHER = """
import os, sys, time
from tea_notebook.workspace import Workspace
from tea_notebook.protocol.records import ToolRecord
path, worker, gate, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ws = Workspace(path)  # the remembered embedder
ws.tools.search("warm up", k=1)
deadline = time.time() + 60
while not os.path.exists(gate):
    if time.time() > deadline:
        sys.exit("gate never opened")
    time.sleep(0.002)
for i in range(n):
    # "r{i}w{worker}" is one token only the fresh revision carries: a stale vector cannot match it
    ws.tools.register(ToolRecord(name=f"own_{worker}", description=f"revision r{i}w{worker} of worker {worker}"))
    hit = ws.tools.search(f"revision r{i}w{worker} of worker {worker}", k=1, mode="semantic")[0]
    assert hit.name == f"own_{worker}", hit
ws.close()
"""


@pytest.mark.slow
def test_concurrent_processes_registering_and_searching(tmp_path):
    """Several processes that register and search in a loop. A race shows up in most rounds;
    up to 8 rounds make its absence a real signal (a fixed library runs all 8, ~20 s)."""
    from tea_notebook.protocol.records import ToolRecord as TR

    workers, n = 3, 30
    for round_ in range(8):
        path = tmp_path / f"round{round_}" / "ws"
        ws = make_ws(path, embedder="hashing:2048")  # big vectors: an index file of ~8 MB
        ws.tools.register_many(
            [TR(name=f"bulk_{j}", description=f"bulk tool number {j} for task {j % 37}") for j in range(1000)]
        )
        ws.tools.index()
        ws.close()
        gate = path.parent / "go"
        argvs = [[sys.executable, "-c", _SEARCHER, str(path), str(w), str(gate), str(n)] for w in range(workers)]
        done = run_released_together(argvs, gate, settle=1.5, timeout=240, cwd=REPO)
        errors = [p.stderr.strip().splitlines()[-1] for p in done if p.returncode != 0]
        assert not errors, f"round {round_}: {errors}"
        ws = make_ws(path)
        for w in range(workers):
            assert [v.version for v in ws.tools.versions(f"own_{w}")] == list(range(1, n + 1))
        assert len(ws.tools) == 1000 + workers
        ws.close()


def test_opening_while_another_process_creates_the_database(tmp_path):
    from tea_notebook.store.database import _SCHEMA, FORMAT, SCHEMA_VERSION

    path = tmp_path / "ws"
    path.mkdir()
    # Another process in the middle of Database.__init__: same statements, transaction still open.
    creator = sqlite3.connect(path / "tea.db", isolation_level=None, timeout=60)
    creator.execute("PRAGMA journal_mode=WAL")
    creator.execute("BEGIN IMMEDIATE")
    for stmt in filter(str.strip, _SCHEMA.split(";")):
        creator.execute(stmt)
    creator.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
    creator.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, tea_notebook\n"
            "ws = tea_notebook.Workspace(sys.argv[1], embedder='hashing')\n"
            "ws.tools.register({'name': 'late', 'description': 'registered by the second process'})\n",
            str(path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    time.sleep(2.0)
    creator.execute("COMMIT")
    creator.close()
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err.strip().splitlines()[-1]
    ws = make_ws(path)
    assert ws.tools.names() == ["late"]
    ws.close()


# -- databases that are not ours --------------------------------------------------------------
def _foreign_sqlite(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, email TEXT);
        INSERT INTO customers(name, email) VALUES ('Ada', 'ada@example.com'), ('Linus', 'l@example.com');
        CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, total REAL);
        INSERT INTO orders(customer, total) VALUES (1, 9.5), (2, 12.25);
        """
    )
    con.commit()
    con.close()


def _foreign_sqlite_with_meta(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('format', 'some_other_app'), ('schema_version', '7');
        CREATE TABLE versions(id INTEGER PRIMARY KEY, label TEXT);
        """
    )
    con.commit()
    con.close()


def _random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(16384))


def _truncated_real(path: Path) -> None:
    src = path.parent.parent / "real"
    ws = make_ws(src)
    fill(ws)
    ws.close()
    path.write_bytes((src / "tea.db").read_bytes()[:1000])


@pytest.mark.parametrize(
    "make, words",
    [
        (_random_bytes, "not an SQLite file"),
        (_truncated_real, "not a readable tea_notebook database"),
        (_foreign_sqlite, "not a readable tea_notebook database"),
        (_foreign_sqlite_with_meta, "another program"),
    ],
    ids=["random_bytes", "truncated_tea_db", "foreign_sqlite", "foreign_sqlite_with_meta_table"],
)
def test_corrupt_or_foreign_database_is_refused_untouched(tmp_path, make, words):
    path = tmp_path / "ws"
    path.mkdir()
    db = path / "tea.db"
    make(db)
    digest = sha256_file(db)
    size = db.stat().st_size
    with pytest.raises(WorkspaceError) as info:
        make_ws(path)
    message = str(info.value)
    assert str(db) in message
    assert words in message
    assert sha256_file(db) == digest and db.stat().st_size == size
    # refusing twice gives the same answer and still changes nothing
    with pytest.raises(WorkspaceError):
        make_ws(path)
    assert sha256_file(db) == digest
    assert not (path / "vectors").exists()


def test_foreign_database_keeps_its_own_tables(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    _foreign_sqlite(path / "tea.db")
    with pytest.raises(WorkspaceError):
        make_ws(path)
    con = sqlite3.connect(path / "tea.db")
    try:
        tables = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        con.close()
    assert tables == ["customers", "orders"]
    assert mode.lower() == "delete"  # not switched to WAL


def test_newer_schema_version_is_refused(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path)
    fill(ws)
    ws.close()
    con = sqlite3.connect(path / "tea.db")
    con.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    con.commit()
    con.close()
    digest = sha256_file(path / "tea.db")
    with pytest.raises(WorkspaceError) as info:
        make_ws(path)
    assert "newer" in str(info.value) and "schema 2" in str(info.value)
    assert sha256_file(path / "tea.db") == digest


def test_workspace_path_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("just a file")
    with pytest.raises(WorkspaceError) as info:
        make_ws(target)
    assert "not a folder" in str(info.value)
    assert target.read_text() == "just a file"


# -- import and configuration -------------------------------------------------------------------
HEAVY = ["faiss", "onnxruntime", "litellm", "pydantic"]


def test_import_has_no_side_effects(tmp_path):
    out = run_py(
        """
        import json, os, sys
        import tea_notebook
        print(json.dumps({"loaded": sorted(m for m in %r if m in sys.modules),
                          "listing": sorted(os.listdir(".")),
                          "version": tea_notebook.__version__}))
        """
        % (HEAVY,),
        cwd=tmp_path,
    )
    result = json.loads(out)
    assert result["loaded"] == []
    assert result["listing"] == []
    assert not (tmp_path / ".tea").exists()
    assert result["version"] == tea_notebook.__version__


#: what opening a workspace and reading its empty registries must not import: each costs milliseconds of
#: the 100 ms CPU an open may take (pydantic and the record models alone were ~70 ms); they load on
#: first need (a record made or read, a run started, a vector touched, a model called)
KEPT_OFF_OPEN = [
    *HEAVY,
    "numpy",
    "jsonschema",
    "jinja2",
    "IPython",
    "asyncio",
    "tea_notebook.protocol.records",
    "tea_notebook.redaction",
    "socket",
    "uuid",
]


def test_opening_a_workspace_loads_no_heavy_module_until_a_record_needs_it(tmp_path):
    out = run_py(
        """
        import json, sys
        import tea_notebook
        from tea_notebook.errors import RegistryError

        kept_off = %r
        loaded = {}
        for moment in ("fresh", "existing"):
            ws = tea_notebook.Workspace(sys.argv[1])
            for registry in (ws.tools, ws.toolkits, ws.envs, ws.agents, ws.memory, ws.experience):
                assert registry.list() == [] and "x" not in registry
            ws.close()
            loaded[moment] = sorted(m for m in kept_off if m in sys.modules)
        ws = tea_notebook.Workspace(sys.argv[1])
        try:  # the first record validated loads pydantic and is refused as before
            ws.tools.register({"name": "no spaces allowed", "description": "d"})
        except RegistryError as exc:
            refused = str(exc)
        print(json.dumps({"loaded": loaded, "refused": refused, "pydantic": "pydantic" in sys.modules}))
        """
        % (KEPT_OFF_OPEN,),
        tmp_path / "ws",
        cwd=tmp_path,
    )
    result = json.loads(out)
    assert result["loaded"] == {"fresh": [], "existing": []}
    assert result["refused"].startswith("invalid tool 'no spaces allowed': field 'name'")
    assert result["pydantic"]


def test_registries_named_by_kind_reach_the_record_class_of_that_kind(tmp_path):
    from tea_notebook.protocol import records
    from tea_notebook.protocol.record_types import RECORD_CLASSES, record_class
    from tea_notebook.protocol.registry import Registry

    for kind, name in RECORD_CLASSES.items():
        assert record_class(kind) is getattr(records, name) and record_class(kind).KIND == kind
    ws = make_ws(tmp_path / "ws")
    assert ws.memory.record_type is records.MemoryRecord and ws.envs.record_type is records.EnvironmentRecord
    with pytest.raises(ValueError, match="no record type of kind 'tools'; the kinds are tool, toolkit"):
        Registry(ws, "tools")
    ws.close()


def test_hashing_workspace_never_loads_model_runtimes(tmp_path):
    out = run_py(
        """
        import json, sys
        import tea_notebook
        ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")
        ws.tools.register({"name": "echo_text", "description": "Echo the text back"})
        names = [h.name for h in ws.tools.search("echo text", k=1)]
        print(json.dumps({"names": names, "loaded": sorted(m for m in ("onnxruntime", "litellm") if m in sys.modules)}))
        """,
        tmp_path / "ws",
        cwd=tmp_path,
    )
    result = json.loads(out)
    assert result["names"] == ["echo_text"]
    assert result["loaded"] == []
    assert sorted(os.listdir(tmp_path)) == ["ws"]


def test_embedder_choice_is_remembered(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path, embedder="hashing:64")
    assert ws.embedder.id == "hashing-64"
    fill(ws)
    first = hits(ws, "download the HTML at a URL", mode="semantic")
    ws.close()

    again = tea_notebook.Workspace(path)  # no embedder argument
    assert again.embedder.id == "hashing-64"
    assert hits(again, "download the HTML at a URL", mode="semantic") == first
    side = index_header(next((path / "vectors").glob("*.faiss")))
    assert side["dim"] == 64
    again.close()

    out = run_py(
        """
        import sys, tea_notebook
        print(tea_notebook.Workspace(sys.argv[1]).embedder.id)
        """,
        path,
    )
    assert out.strip() == "hashing-64"


def test_changing_a_workspaces_embedder_is_announced_and_reopening_it_is_quiet(tmp_path):
    """A constructor argument that changes what the workspace keeps for every later session says so."""
    import warnings

    from tea_notebook.errors import WorkspaceSettingChanged

    path = tmp_path / "ws"
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkspaceSettingChanged)
        tea_notebook.Workspace(path, embedder="hashing").close()  # a new workspace: nothing to announce
        tea_notebook.Workspace(path, embedder="hashing").close()  # the same choice again
        tea_notebook.Workspace(path).close()  # no choice: the stored one
    with pytest.warns(WorkspaceSettingChanged, match=r"now 'hashing:128' \(it was 'hashing:256'\)"):
        ws = tea_notebook.Workspace(path, embedder="hashing:128")
    ws.close()
    reopened = tea_notebook.Workspace(path)
    assert reopened.embedder.id.startswith("hashing") and reopened.db.meta("embedder") == "hashing:128"
    reopened.close()
