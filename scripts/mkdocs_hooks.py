"""mkdocs hooks (mkdocs.yml ``hooks:``) and a griffe extension (mkdocstrings' ``extensions:``) for the site.

- The tutorials in ``notebooks/`` become the site's ``notebooks/`` pages. They stay where they are (no copy, no
  symlink in ``docs/``: a symlink there would also be walked by the sdist build, which then skipped the real
  ``notebooks/`` folder as already seen); mkdocs-jupyter renders them with their stored outputs.
- ``SphinxRoles`` turns the Sphinx roles our docstrings use (":func:`x`", ":class:`~a.B`", ":meth:`T <a.T>`")
  into autorefs cross-references before mkdocstrings renders them: a link where the target is documented on
  the site, plain code otherwise. The docstrings stay as they are (IDEs and ``help()`` read them).
- A rendered notebook's table of contents is rebuilt from its rendered headings: mkdocs-jupyter builds it from
  a markdown conversion whose ids drop inline code ("Register tools with ``%%tool``" got ``#…-with``), so
  those links pointed nowhere.
- The cell-tag toolbars (``nbval-ignore-output``, a test detail) are dropped from rendered notebooks, and the
  ✅/❌ of the benchmark tables become the theme's own icons with a word (without an emoji font they were
  empty boxes).
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import griffe
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File
from mkdocs.structure.toc import get_toc

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "tea_notebook"

# ":func:`name`", ":py:meth:`~a.b.c`", ":class:`Title <a.b.C>`"
SPHINX_ROLE = re.compile(r":(?:py:)?(?P<role>mod|func|class|meth|data|attr|exc|obj|const):`(?P<text>[^`]+)`")
EXPLICIT_TITLE = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def _resolve(obj: griffe.Object, name: str) -> str | None:
    """The full path of ``name`` as written in ``obj``'s docstring, or None when it names nothing we hold."""
    if name == PACKAGE or name.startswith(PACKAGE + "."):
        return name
    head, _, rest = name.partition(".")
    try:
        base = obj.resolve(head)
    except griffe.NameResolutionError:
        return None
    return f"{base}.{rest}" if rest else base


def role_to_autoref(obj: griffe.Object, match: re.Match[str]) -> str:
    """One Sphinx role as an optional autorefs reference (a link if the target is on the site, else code)."""
    text = match["text"].strip()
    explicit = EXPLICIT_TITLE.match(text)
    if explicit:
        title, target = explicit["title"], explicit["target"].strip()
    else:
        target = text
        title = text.lstrip("~.")
        if text.startswith("~"):
            title = title.rsplit(".", 1)[-1]
    target = target.lstrip("~.")
    code = f"<code>{html.escape(title)}</code>"
    path = _resolve(obj, target)
    if path is None:
        return code
    return f'<autoref identifier="{html.escape(path)}" optional hover>{code}</autoref>'


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the package to autorefs references (see the module doc)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Walk every object of the loaded package once, after all of it is loaded (so names resolve)."""
        if pkg.name != PACKAGE:
            return
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = SPHINX_ROLE.sub(lambda m, o=obj: role_to_autoref(o, m), obj.docstring.value)
            stack.extend(member for member in obj.members.values() if not member.is_alias)


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files, config):
    """Add every ``notebooks/*.ipynb`` (a page links to one as ``../notebooks/NAME.ipynb`` from a guide)."""
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        # a plain File read from the checkout's root (mkdocs-jupyter's wrapper cannot take a generated one)
        files.append(File(f"notebooks/{notebook.name}", str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


class _Headings(HTMLParser):
    """The ``(level, id, text)`` of every ``<h1>``…``<h6>`` with an id, in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.headings: list[tuple[int, str, str]] = []
        self._open: tuple[int, str, list[str]] | None = None
        self._skip = 0  # inside the heading's permalink (its "¶")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag) and values.get("id"):
            self._open = (int(tag[1]), values["id"] or "", [])
        elif self._open and tag == "a" and "anchor-link" in (values.get("class") or ""):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if self._skip and tag == "a":
            self._skip -= 1
        elif self._open and tag == f"h{self._open[0]}":
            level, anchor, parts = self._open
            self.headings.append((level, anchor, " ".join("".join(parts).split())))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open and not self._skip:
            self._open[2].append(data)


def notebook_toc(content: str):
    """The table of contents of a rendered notebook, from its headings' real ids and full text."""
    parser = _Headings()
    parser.feed(content)
    tokens: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []
    for level, anchor, name in parser.headings:
        token = {"level": level, "id": anchor, "name": name, "children": []}
        while stack and stack[-1]["level"] >= level:
            stack.pop()
        (stack[-1]["children"] if stack else tokens).append(token)
        stack.append(token)
    return get_toc(tokens)


CELL_TAGS = re.compile(
    r'<div class="celltoolbar">\s*<div class="button_container tags_button_container">\s*'
    r'<span class="tag-container">(?:\s*<span class="cell-tag">[^<]*</span>)*\s*</span>\s*</div>\s*</div>'
)


def _icon(name: str) -> str:
    """An icon the Material theme ships, as inline SVG (no font, no network)."""
    import material

    svg = Path(material.__file__).parent / "templates" / ".icons" / "material" / f"{name}.svg"
    return svg.read_text().strip()


def verdict_marks(content: str) -> str:
    """✅/❌ → the theme's check/close icons with a word, readable without an emoji font."""
    if "✅" not in content and "❌" not in content:
        return content
    passed = f'<span class="tea-verdict tea-pass">{_icon("check-circle")} met</span>'
    failed = f'<span class="tea-verdict tea-fail">{_icon("close-circle")} missed</span>'
    return content.replace("✅", passed).replace("❌", failed)


def on_page_content(html_text: str, page, config, files) -> str:
    """Fix what a rendered page shows: notebook tables of contents and cell tags, verdict marks."""
    if page.file.src_uri.endswith(".ipynb"):
        page.toc = notebook_toc(html_text)
        html_text = CELL_TAGS.sub("", html_text)
    return verdict_marks(html_text)
