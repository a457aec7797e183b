"""Play the host for ``test_browser_boundary.py``: start the browser environment as the user this
script runs as, look at the browser's processes from the host, and try the host's files from inside
the browser; print what was seen as one JSON line. The tests run it as root and as an unprivileged
user, so the same probes meet the boundary from both sides.

    python browser_host.py '{"folder": "...", "secrets": {"path": "marker", ...}, "visible": "/usr/..."}'

``secrets`` are host paths the browser must not see (the marker is text each one holds); ``visible``
is a path it must see (the probe's control). Each path is opened twice, both bypassing the
environment's own URL check (what a policy bug or a compromised renderer would try): as the page
(``file://`` navigation) and as iframes of a local page.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    wanted = ("Uid", "Gid", "CapEff", "CapPrm", "Seccomp", "NoNewPrivs")
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines) if k in wanted}


async def _look(context, url: str) -> str:
    """What a fresh tab shows at ``url`` (or the navigation's error)."""
    page = await context.new_page()
    try:
        await page.goto(url, timeout=5000)
        return await page.content()
    except Exception as exc:  # noqa: BLE001 - the error is the observation
        return f"ERROR {str(exc).splitlines()[0]}"
    finally:
        await page.close()


async def main() -> None:
    config = json.loads(sys.argv[1])
    from tea_notebook.envs import boundary
    from tea_notebook.envs.browser import Browser

    report: dict = {"uid": os.getuid(), "euid": os.geteuid()}
    if boundary.bubblewrap() is None:
        report["unavailable"] = "bubblewrap cannot run here"
        print(json.dumps(report), flush=True)
        return
    env = Browser(Path(config["folder"]), timeout=8, isolation="bubblewrap")
    try:
        await env.start()
        pid = env.browser_pid
        assert pid is not None, "no browser process found"
        report["boundary"] = env.boundary
        report["status"] = _status(pid)
        report["uid_map"] = Path(f"/proc/{pid}/uid_map").read_text().split()
        report["own_user_ns"] = os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
        report["own_net_ns"] = os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        try:
            report["goto_file"] = await env.call("goto", {"url": "file:///etc/passwd"})
        except Exception as exc:  # noqa: BLE001
            report["goto_file"] = f"{type(exc).__name__}: {exc}"
        context = env._context  # noqa: SLF001 - past the environment's check, on purpose
        paths = [*config["secrets"], config["visible"]]
        report["pages"] = {path: await _look(context, "file://" + path) for path in paths}
        attack = env._box.profile / "attack.html"  # noqa: SLF001 - a local page the browser can open
        attack.write_text("".join(f'<iframe src="file://{p}"></iframe>' for p in paths))
        page = await context.new_page()
        await page.goto("file://" + str(attack), timeout=5000)
        await asyncio.sleep(0.5)
        frames = {}
        for i, frame in enumerate(page.frames[1:]):
            try:
                frames[f"{i} {frame.url}"] = await asyncio.wait_for(frame.content(), 3)
            except Exception as exc:  # noqa: BLE001 - a frame that never settles
                frames[f"{i} {frame.url}"] = f"ERROR {type(exc).__name__}"
        report["frames"] = frames
        report["frame_count"] = len(page.frames) - 1
    finally:
        await env.stop()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
