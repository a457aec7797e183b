"""Re-execute the tutorials in place (offline, no TEA_MODEL) and store them without timing metadata.

    .venv/bin/python scripts/refresh_notebooks.py
"""

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    os.environ.pop("TEA_MODEL", None)
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()  # fmt: skip
        nbformat.write(nb, path)
        print("refreshed", path.relative_to(ROOT), file=sys.stderr)


if __name__ == "__main__":
    main()
