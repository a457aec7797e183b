"""The built documentation site shows the product as it is: links that land, no markup left raw.

One strict build per session (mkdocs.yml, scripts/mkdocs_hooks.py); the checks read its HTML and its search
index as a reader and the search box see them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")

ROOT = Path(__file__).resolve().parents[1]
RAW_ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|data|attr|exc|obj|const):(?:`|<code>|&#x60;|&#96;)")


class _Page(HTMLParser):
    """The ids and the ``href``s of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"] or "")
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"] or "")


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site, built once with ``mkdocs build --strict`` (a warning fails the build)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="session")
def pages(site: Path) -> dict[Path, _Page]:
    """Every built HTML page, parsed."""
    parsed = {}
    for path in site.rglob("*.html"):
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        parsed[path.resolve()] = page
    return parsed


def test_no_raw_sphinx_roles_in_pages(site: Path) -> None:
    """ ":func:`x`" in a docstring is rendered as a cross-reference (or code), never as the raw role."""
    raw = {
        str(path.relative_to(site)): RAW_ROLE.findall(path.read_text(encoding="utf-8")) for path in site.rglob("*.html")
    }
    raw = {page: len(found) for page, found in raw.items() if found}
    assert not raw, f"raw Sphinx roles left in: {raw}"


def test_no_raw_sphinx_roles_in_search_index(site: Path) -> None:
    """The search box shows what the page shows."""
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    raw = [doc["location"] for doc in index["docs"] if RAW_ROLE.search(doc["text"] + doc["title"])]
    assert not raw, f"raw Sphinx roles in the search index of: {raw[:10]}"


def test_roles_become_links(site: Path) -> None:
    """A role naming a documented object links to it (e.g. the Runtime page to ``Trajectory.context``)."""
    runtime = (site / "reference" / "runtime.html").read_text(encoding="utf-8")
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]*href="#[^"]*Trajectory\.context"', runtime)


def test_every_fragment_link_lands(site: Path, pages: dict[Path, _Page]) -> None:
    """Every ``#fragment`` link inside the site (tables of contents included) points to an existing id."""
    broken = []
    for path, page in pages.items():
        for href in page.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.fragment:
                continue
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if target in pages and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{path.relative_to(site)} → {href}")
    assert not broken, "\n".join(broken)


def test_no_emoji_marks_or_cell_tags(site: Path) -> None:
    """✅/❌ need an emoji font (they are the theme's icons instead); nbval's cell tags are not shown."""
    for path in site.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        assert "✅" not in text and "❌" not in text, path
        assert 'class="cell-tag"' not in text, path


def test_images_are_used_and_small() -> None:
    """Every picture in docs/images is shown by a page and stays small (scripts/screenshots.py makes them)."""
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    for image in sorted((ROOT / "docs" / "images").glob("*.png")):
        assert f"images/{image.name}" in pages, f"{image.name} is on no page"
        assert image.stat().st_size < 200 * 1024, f"{image.name} is {image.stat().st_size // 1024} KB"


def test_the_screenshot_script_finds_its_tutorial_cells() -> None:
    """scripts/screenshots.py runs tutorial 06's CORAL team: the cells it picks are still there."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
    assert spec and spec.loader
    screenshots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(screenshots)
    cells = screenshots.tutorial_cells("06_toolself_and_coral.ipynb", screenshots.CORAL_CELLS)
    assert len(cells) == len(screenshots.CORAL_CELLS)
