"""The TEA tool manifest: export and import a tool registry as JSON, and hot-reload a watched file.

Entries carry id, name, description, version, source attribution, parameter and return schemas,
dependencies, permissions, code and its sha256 fingerprint (App. E.5). Import validates the whole
file before touching the registry, so a corrupt or foreign file changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tea_notebook.errors import ManifestError, TeaError
from tea_notebook.protocol.records import ToolRecord
from tea_notebook.redaction import redact

if TYPE_CHECKING:
    from tea_notebook.protocol.tcp import ToolRegistry

log = logging.getLogger(__name__)
MANIFEST_FORMAT = "tea-tool-manifest"
MANIFEST_VERSION = 1
_ENTRY_ONLY = {"id", "fingerprint", "code"}


def export_manifest(tools: "ToolRegistry", path: str | Path | None = None) -> dict[str, Any]:
    """Every current tool as a manifest dict; written atomically to ``path`` when given.

    Secrets are redacted by value (environment secrets, secret-shaped strings) before anything is
    written, in the code too; the fingerprint is that of the code as exported. Key names are not
    used here: a parameter schema names an ``api_key`` parameter without holding one.
    """
    entries = []
    for rec in tools.list(_usage=False):
        original = rec.content()
        data = redact(original, keys=False)
        code = data.pop("source")
        if code != original.get("source"):
            log.warning("tool %s: secrets in its code were redacted in the exported manifest", rec.name)
        entries.append(
            {
                "id": f"{rec.name}@{rec.version}",
                **data,
                "version": rec.version,
                "code": code,
                "fingerprint": hashlib.sha256(code.encode()).hexdigest() if code else rec.content_hash(),
            }
        )
    manifest = {"format": MANIFEST_FORMAT, "format_version": MANIFEST_VERSION, "tools": entries}
    if path is not None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        os.replace(tmp, path)
    return manifest


@dataclass
class ImportReport:
    """What an import did, by tool name."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped_older: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the registry changed."""
        return bool(self.added or self.updated)


def _read(path: Path) -> list[ToolRecord]:
    """Parse and validate a manifest file completely, or raise ManifestError naming the problem."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON (truncated or corrupt?): {exc}") from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f'{path} is not a tea tool manifest (no "format": "{MANIFEST_FORMAT}")')
    if data.get("format_version") != MANIFEST_VERSION:
        raise ManifestError(
            f"{path} has manifest format_version {data.get('format_version')!r}; this reader knows {MANIFEST_VERSION}"
        )
    entries = data.get("tools")
    if not isinstance(entries, list):
        raise ManifestError(f'{path}: "tools" must be a list')
    records, seen = [], set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ManifestError(f"{path}: tools[{i}] is not an object")
        name = entry.get("name", f"tools[{i}]")
        code = entry.get("code", "")
        if not isinstance(code, str):
            raise ManifestError(f'{path}: tool {name!r}: "code" must be a string')
        fingerprint = entry.get("fingerprint")
        if code and fingerprint and hashlib.sha256(code.encode()).hexdigest() != fingerprint:
            raise ManifestError(f"{path}: tool {name!r}: code does not match its fingerprint")
        fields = {k: v for k, v in entry.items() if k not in _ENTRY_ONLY}
        fields["source"] = code
        try:
            rec = ToolRecord.model_validate(fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ManifestError(f"{path}: tool {name!r}: field {where!r}: {first['msg']}") from None
        if rec.name in seen:
            raise ManifestError(f"{path}: tool {rec.name!r} appears twice")
        bad = [r.type for r in rec.relations if r.type not in ToolRecord.RELATION_TYPES]
        if bad:
            allowed = ", ".join(sorted(ToolRecord.RELATION_TYPES))
            raise ManifestError(f"{path}: tool {rec.name!r}: relation type {bad[0]!r} is not one of {allowed}")
        seen.add(rec.name)
        records.append(rec)
    return records


def import_manifest(tools: "ToolRegistry", path: str | Path, *, trust_code: bool = False) -> ImportReport:
    """Merge a manifest into the registry in one transaction.

    A tool not in the registry is added; one whose manifest version is at least the registry's
    current version and whose content differs becomes a new version; an older one is skipped.
    Code is kept but only runs in this process when ``trust_code`` is True.
    """
    records = _read(Path(path))
    report = ImportReport()
    to_register = []
    for rec in records:
        current = tools.get(rec.name) if rec.name in tools else None
        incoming = rec.model_copy(update={"trusted": trust_code and bool(rec.source)})
        same_content = (
            current is not None
            and current.content_hash() == incoming.model_copy(update={"trusted": current.trusted}).content_hash()
        )
        if current is None:
            report.added.append(rec.name)
        elif same_content and (current.trusted or not incoming.trusted):
            report.unchanged.append(rec.name)
            continue
        elif same_content:
            report.updated.append(rec.name)  # the same code, now trusted
        elif rec.version and rec.version < current.version:
            report.skipped_older.append(rec.name)
            continue
        elif rec.version and rec.version < current.version:
            report.skipped_older.append(rec.name)
            continue
        else:
            report.updated.append(rec.name)
        to_register.append(incoming)
    if to_register:
        try:
            tools.register_many(to_register, note=f"manifest {Path(path).name}")
        except TeaError as exc:
            raise ManifestError(f"{path}: {exc}") from None
    return report


class ManifestWatcher:
    """Polls a manifest file and re-imports it when its content changes (hot reload).

    A bad file is reported in ``last_error`` and leaves the registry as it was.
    """

    def __init__(self, tools: "ToolRegistry", path: Path, *, interval: float = 1.0, trust_code: bool = False):
        self.tools, self.path, self.interval, self.trust_code = tools, path, interval, trust_code
        self.reloads = 0
        self.last_report: ImportReport | None = None
        self.last_error: str | None = None
        self._digest: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tea-watch-{path.name}", daemon=True)

    def start(self) -> "ManifestWatcher":
        """Import once now, then keep watching in a background thread."""
        self.check()
        self._thread.start()
        return self

    def check(self) -> bool:
        """Re-import if the file changed since the last look; True when it imported."""
        try:
            digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError as exc:
            self.last_error = f"cannot read {self.path}: {exc.strerror}"
            return False
        if digest == self._digest:
            return False
        self._digest = digest
        try:
            self.last_report = import_manifest(self.tools, self.path, trust_code=self.trust_code)
        except TeaError as exc:
            self.last_error = str(exc)
            log.warning("manifest reload skipped: %s", exc)
            return False
        self.last_error = None
        self.reloads += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.check()

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def __enter__(self) -> "ManifestWatcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
