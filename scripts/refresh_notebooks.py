"""Re-execute the tutorials in place (offline, no TEA_MODEL) and store them without timing metadata.

.venv/bin/python scripts/refresh_notebooks.py
"""

import os
import sys
from pathlib import Path

import nbformat

from tea_notebook.notebooks_job import execute_notebook

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    os.environ.pop("TEA_MODEL", None)
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        # a kernel of this Python over private Unix sockets (what `tea notebooks --headless` uses)
        nb, error = execute_notebook(path)
        if error:
            sys.exit(f"{path.relative_to(ROOT)} failed, left as it was: {error}")
        nbformat.write(nb, path)
        print("refreshed", path.relative_to(ROOT), file=sys.stderr)


if __name__ == "__main__":
    main()
