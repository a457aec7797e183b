"""The Ray engine: each task runs as a Ray task, in a temporary workspace built from an exported spec
of the agent and its tools (:mod:`tea_notebook.eval.spec`), and ships back its result AND its run
tree (runs, events, full texts), which is imported into the driver's workspace, so
``ws.trajectory(run_id)`` works there as for a local run. No shared file system is assumed: the
spec and the attachments travel with the task.

``ray.init()`` starts a local Ray (with as many CPUs as the evaluation's ``concurrency``) unless Ray
is already initialised or ``address=`` names a cluster to join. A worker that dies mid-task makes
that task an error with the reason; the evaluation goes on. Ray is an optional extra:
``pip install tea_notebook[ray]``.

What comes back from a worker is redacted again in the driver before it is stored
(:func:`redacted_tree`): the worker redacts with what it knows, but a secret set only in the
driver's environment is known only here. Attachments are written in the worker beneath its task
folder without following links, under a plain file name.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from tea_notebook.errors import TeaError
from tea_notebook.eval.attempt import GRACE, Attempt, Limits
from tea_notebook.eval.spec import export_spec
from tea_notebook.redaction import redact

if TYPE_CHECKING:
    from tea_notebook.eval.spec import WorkerHost
    from tea_notebook.eval.tasks import Task
    from tea_notebook.runtime.host import RunHost

RETURN_SLACK = 30.0  # seconds past a task's own timeout before the driver gives up on its Ray task


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise TeaError(
            "engine='ray' needs Ray: pip install 'tea_notebook[ray]' (or pip install 'ray>=2.40,<3')"
        ) from None
    return ray


def _installed(module: Any) -> bool:
    """Whether a module is importable by any process of this environment (in site-packages or
    the standard library), as opposed to a test file or a notebook."""
    path = getattr(module, "__file__", None)
    if not path:
        return True  # built-in
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    path = os.path.realpath(path)
    return any(path.startswith(os.path.realpath(r) + os.sep) for r in roots)


def _ship_scripts_by_value(spec: dict[str, Any]) -> None:
    """Scripted models written in a test file or a notebook travel by value (a worker cannot import them)."""
    from ray import cloudpickle

    for model in (spec.get("scripted") or {}).values():
        fn = getattr(model, "_fn", None)
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        if module is not None and module.__name__ != "__main__" and not _installed(module):
            cloudpickle.register_pickle_by_value(module)


def _task_payload(task: "Task") -> dict[str, Any]:
    """The task with its attachments' bytes (the worker may be on another machine)."""
    data = task.to_dict()
    data["attachments"] = [{"name": Path(f).name, "data": Path(f).read_bytes()} for f in task.files]
    data["files"] = []
    return data


def remote_task(
    spec: dict[str, Any],
    payload: dict[str, Any],
    limits: dict[str, Any],
    model: str | None,
    prompt: str,
    make: "Callable[..., WorkerHost]",
) -> dict[str, Any]:
    """What one Ray task does (in the worker): build the workspace (``make``, the driver's workspace
    class, pickled by reference), run the task, export its run tree."""
    from tea_notebook._sync import run_sync
    from tea_notebook.eval.attempt import UsageWatcher, run_task
    from tea_notebook.eval.spec import build_workspace
    from tea_notebook.eval.tasks import Task

    folder = Path(tempfile.mkdtemp(prefix="tea-eval-"))
    try:
        files = [
            str(folder / write_attachment(folder, i, item["name"], item["data"]))
            for i, item in enumerate(payload.pop("attachments", []))
        ]
        task = Task.from_dict({**payload, "files": files})
        ws, agent = build_workspace(spec, folder / "ws", make)
        try:
            watcher = UsageWatcher(ws)

            async def go() -> Attempt:
                return await run_task(
                    ws, agent, task, watcher=watcher, limits=Limits(**limits), model=model, prompt=prompt
                )

            attempt = run_sync(go())
            watcher.close()
            ws.events.flush()
            tree = ws.db.export_run_tree(attempt.run_id) if attempt.run_id else None
        finally:
            ws.close()
        return {"attempt": attempt.to_dict(), "tree": tree, "worker": f"pid {os.getpid()}"}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def attachment_name(name: Any) -> str:
    """A plain file name for an attachment, or a TeaError: no folder part, no ``..``, nothing hidden
    in it (the name travels with the task and becomes a path where it lands)."""
    text = str(name)
    if not text or text in (".", "..") or "/" in text or "\\" in text or "\0" in text:
        raise TeaError(f"attachment name {text!r} refused: it must be a plain file name, not a path")
    return text


def write_attachment(folder: Path, index: int, name: Any, data: bytes) -> str:
    """Write one attachment at ``files/<index>/<name>`` beneath ``folder`` without following links
    (:class:`~tea_notebook.envs.safe_open.Beneath`); returns the path relative to ``folder``."""
    from tea_notebook.envs.safe_open import Beneath

    rel = f"files/{int(index)}/{attachment_name(name)}"
    beneath = Beneath(folder)
    try:
        opened = beneath.open(rel, "write")
    finally:
        beneath.close()
    with os.fdopen(opened.fd, "wb") as out:
        out.truncate(0)
        out.write(bytes(data))
    return rel


def redacted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    """A worker's run tree as the driver stores it: every event field and run row redacted again
    here, clipped texts first restored from the tree's full texts (so a secret past the clip is
    found too), then clipped again with new full texts. Full texts the tree carries that no field
    points to are not imported."""
    from tea_notebook.store.blobs import blob_ref, build, clip, clip_value, digest

    kept = {row[0]: (row[2], row[3]) for row in tree.get("blobs") or []}
    memo: dict[str, str | None] = {}

    def full(key: str, depth: int = 0) -> str | None:
        if key in memo:
            return memo[key]
        data, recipe = kept.get(key, (None, None))
        text: str | None = None
        try:
            if data is not None:
                text = bytes(data).decode("utf-8", "surrogatepass")
            elif recipe is not None and depth < 16:
                text = build(json.loads(recipe), lambda k: full(k, depth + 1))
        except (ValueError, TypeError, KeyError):
            text = None
        memo[key] = text if text is not None and digest(text) == key else None
        return memo[key]

    def expand(value: Any) -> Any:
        if isinstance(value, str):
            key = blob_ref(value) if "full text: ws.events.full_text('sha256:" in value[-200:] else None
            restored = full(key) if key else None
            return value if restored is None else restored
        if isinstance(value, dict):
            return {k: expand(v) for k, v in value.items()}
        if isinstance(value, list):
            return [expand(v) for v in value]
        return value

    blobs: dict[str, str] = {}
    events = []
    for row in tree.get("events") or []:
        *head, data = row
        clean = clip_value(redact(expand(json.loads(data) if isinstance(data, str) else data)), blobs)
        events.append([*head, json.dumps(clean)])
    runs = []
    for row in tree.get("runs") or []:
        out = {}
        for column, value in row.items():
            if isinstance(value, str) and column not in ("id", "parent_id", "forked_from"):
                text = str(redact(expand(value)))
                value, key = clip(text)
                if key is not None:
                    blobs[key] = text
            out[column] = value
        runs.append(out)
    stored = [[key, len(text), text.encode("utf-8", "surrogatepass"), None] for key, text in blobs.items()]
    return {"runs": runs, "events": events, "blobs": stored}


def redacted_attempt(data: dict[str, Any]) -> dict[str, Any]:
    """A worker's attempt with its texts (answer, error, model) redacted here."""
    texts = ("answer", "error", "model")
    return {k: str(redact(v)) if k in texts and isinstance(v, str) else v for k, v in data.items()}


class RayExecutor:
    """Runs each task as a Ray task and imports its run tree into the driver's workspace."""

    name = "ray"

    def __init__(
        self,
        ws: "RunHost",
        agent: Any,
        *,
        limits: Limits,
        model: str | None,
        prompt: str,
        address: str | None = None,
        concurrency: int = 1,
    ):
        ray = _ray()
        self.ws, self.limits, self.model, self.prompt = ws, limits, model, prompt
        # the worker makes a workspace of the driver's class (a Workspace: eval/ cannot import it)
        self.make = cast("Callable[..., WorkerHost]", type(ws))
        if not ray.is_initialized():
            # quiet in a cell: no workers' output, no INFO/WARNING banners from Ray's own logger
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
            if address is None:
                options["num_cpus"] = max(concurrency, 1)
            ray.init(address=address, **options)
        elif address is not None and address not in ("auto", _connected_address(ray)):
            # the same cluster can be named differently (ray:// client port, GCS port): say it, go on
            warnings.warn(
                f"address={address!r} is not used: Ray is already running in this process (connected to "
                f"{_connected_address(ray) or 'a local cluster'!r}); call ray.shutdown() first to join another",
                stacklevel=3,
            )
        spec = export_spec(ws, agent, model)
        _ship_scripts_by_value(spec)
        self.spec_ref = ray.put(spec)
        self.remote = ray.remote(num_cpus=1, max_retries=0)(remote_task)
        self.limits_data = {"timeout": limits.timeout, "max_steps": limits.max_steps, "max_tokens": limits.max_tokens}

    def running_cost(self) -> float:
        """Costs of tasks in flight are known only when they return."""
        return 0.0

    async def run(self, task: "Task") -> Attempt:
        """Submit one task and wait for it; a dead worker or a lost task is an error attempt."""
        ray = _ray()
        ref = self.remote.remote(
            self.spec_ref, _task_payload(task), self.limits_data, self.model, self.prompt, self.make
        )
        wait = None if self.limits.timeout is None else self.limits.timeout + GRACE + RETURN_SLACK
        try:
            out = await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout=wait)
        except asyncio.TimeoutError:
            ray.cancel(ref, force=True)
            return Attempt(
                task.id,
                run_status="error",
                error=f"timed out: the Ray task did not return within {wait:g}s and was cancelled",
            )
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)
            raise
        except ray.exceptions.RayError as exc:
            first = str(redact(str(exc).strip().splitlines()[0][:300])) if str(exc).strip() else ""
            return Attempt(
                task.id, run_status="error", error=f"the Ray worker running it failed ({type(exc).__name__}): {first}"
            )
        if out.get("tree"):
            self.ws.db.import_run_tree(redacted_tree(out["tree"]))
        return Attempt(**redacted_attempt(out["attempt"]))

    async def close(self) -> None:
        """Ray stays up for the next evaluation (``ray.shutdown()`` stops it)."""


__all__ = ["RayExecutor", "attachment_name", "redacted_attempt", "redacted_tree", "remote_task", "write_attachment"]


def _connected_address(ray: Any) -> str:
    """The address of the cluster this process's Ray is connected to ("" when unknown)."""
    try:
        return str(ray.get_runtime_context().gcs_address or "")
    except Exception:  # noqa: BLE001 - older Ray: no way to tell
        return ""
