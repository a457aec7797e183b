"""Running the Python examples of a markdown page (the README, a guide page) in order, in one fresh kernel
(test support, not tests).

A page's examples are its fenced ```` ```python ```` blocks. A block that cannot run offline is marked by an
HTML comment on the line just before its fence, ``<!-- skip: why -->``; the reason is required and the
mark is visible in the page's source only. Everything else runs, top to bottom, as cells of one notebook in
a kernel of this Python (a real ipykernel over private Unix sockets, as ``tea notebooks --headless``
runs the tutorials), in a folder of the test's own. ``checks`` are cells run after the page in the same
kernel: assertions on what the page's examples made, which the page does not show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"<!--\s*skip:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    """One ```python block of a page: its code, its first line's number in the page, and why it is
    skipped (None when it runs)."""

    code: str
    line: int
    skip: str | None = None


def python_blocks(text: str) -> list[Block]:
    """The page's ```python blocks in order. A ``<!-- skip: -->`` mark without a reason is an error."""
    blocks = []
    for m in _FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = None
        if "<!--" in before and "skip" in before:
            mark = _SKIP.search(before)
            assert mark and mark.group(1), f"a skip mark needs a reason: {before!r}"
            skip = mark.group(1)
        blocks.append(Block(m.group(1), text[: m.start()].count("\n") + 2, skip))
    return blocks


class ExampleFailed(AssertionError):
    """A page's example (or a check after it) failed in the kernel."""


def run_page(page: Path | str, folder: Path, *, checks: list[str] = (), timeout: int = 600, text: str | None = None):
    """Run the page's runnable blocks, then ``checks``, in order in one fresh kernel whose working folder is
    ``folder``; returns the executed notebook. Raises :class:`ExampleFailed` naming the page, the block's
    line and the error when one fails."""
    import nbformat

    from tea_notebook.notebooks_job import execute_notebook

    page = Path(page)
    text = page.read_text() if text is None else text
    runnable = [b for b in python_blocks(text) if b.skip is None]
    cells = [nbformat.v4.new_code_cell(b.code, metadata={"line": b.line}) for b in runnable]
    cells += [nbformat.v4.new_code_cell(c, metadata={"line": f"check {i + 1}"}) for i, c in enumerate(checks)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{page.stem}.examples.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    nb, error = execute_notebook(path, cwd=folder, timeout=timeout)
    if error:
        failing = next(
            (c for c in nb.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))), None
        )
        where = f"line {failing.metadata['line']}" if failing is not None else "a cell"
        trace = ""
        if failing is not None:
            err = next(o for o in failing.outputs if o.get("output_type") == "error")
            trace = f"{err['ename']}: {err['evalue']}"
        code = failing.source if failing is not None else ""
        raise ExampleFailed(f"{page.name}, the example at {where} failed: {trace or error}\n---\n{code}")
    return nb


def printed(nb, index: int = -1) -> str:
    """What a cell of an executed notebook printed (its stream outputs)."""
    return "".join(o.get("text", "") for o in nb.cells[index].outputs if o.get("output_type") == "stream")
