"""mkdocs hook (mkdocs.yml ``hooks:``): the tutorials in ``notebooks/`` become the site's ``notebooks/`` pages.

They stay where they are (no copy, no symlink in ``docs/``: a symlink there would also be walked by the
sdist build, which then skipped the real ``notebooks/`` folder as already seen); mkdocs-jupyter renders
them with their stored outputs.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files, config):
    """Add every ``notebooks/*.ipynb`` (a page links to one as ``../notebooks/NAME.ipynb`` from a guide)."""
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        # a plain File read from the checkout's root (mkdocs-jupyter's wrapper cannot take a generated one)
        files.append(File(f"notebooks/{notebook.name}", str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
