"""Persistence of one workspace: a SQLite database in WAL mode and rebuildable vector index files."""

from tea_notebook.store.database import Database, StoredVersion

__all__ = ["Database", "StoredVersion"]
