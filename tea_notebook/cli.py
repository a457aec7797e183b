"""The ``tea`` command line: inspect a workspace's registries and run the demo."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError
from tea_notebook.flags import EVAL_OPTIONS, add_flags

if TYPE_CHECKING:
    from tea_notebook.runtime.events import Event


def _workspace(args: argparse.Namespace):
    from tea_notebook.workspace import Workspace

    return Workspace(args.workspace)


def _registry(ws: Any, kind: str):
    return {"tools": ws.tools, "toolkits": ws.toolkits, "envs": ws.envs, "agents": ws.agents}[kind]


def cmd_list(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    reg = _registry(ws, args.kind)
    if args.query:
        hits = reg.search(args.query, k=args.k, mode=args.mode)
        if args.json:
            rows = [{"name": h.name, "score": h.score, "semantic": h.semantic, "keyword": h.keyword} for h in hits]
            print(json.dumps(rows))
        for h in [] if args.json else hits:
            print(f"{h.score:6.3f}  {h.name:32s} {h.record.description[:70]}")
        return 0
    records = reg.list()
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        return 0
    for r in records:
        print(f"v{r.version:<3} {r.name:32s} {r.category:12s} {r.description[:60]}")
    if not records:
        print(f"(no {args.kind} in {ws.path})")
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    print(_registry(_workspace(args), args.kind).describe(args.name))
    return 0


def cmd_versions(args: argparse.Namespace) -> int:
    import datetime as dt

    for v in _registry(_workspace(args), args.kind).versions(args.name):
        when = dt.datetime.fromtimestamp(v.created_at).isoformat(timespec="seconds")
        mark = "*" if v.current else " "
        print(f"{mark} v{v.version:<3} {v.hash[:12]}  {when}  {v.note}")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    rec = _registry(_workspace(args), args.kind).rollback(args.name, args.version)
    print(f"{args.name}: version {rec.version} is current")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    manifest = _workspace(args).tools.export_manifest(args.path)
    print(f"wrote {len(manifest['tools'])} tools to {args.path}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    report = _workspace(args).tools.import_manifest(args.path, trust_code=args.trust_code)
    print(
        f"added {len(report.added)}, updated {len(report.updated)}, unchanged {len(report.unchanged)}, "
        f"skipped (older) {len(report.skipped_older)}"
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tea_notebook.demo import run_demo

    run_demo(args.workspace)
    return 0


def cmd_notebooks(args: argparse.Namespace) -> int:
    from tea_notebook.notebooks_job import cmd_notebooks as run

    return run(args)


def cmd_run(args: argparse.Namespace) -> int:
    from tea_notebook.agents.kinds import resolve
    from tea_notebook.models.client import display_name

    ws = _workspace(args)
    # as %%agent NAME: a registered agent of any kind, a kind's shortcut, or a new plain agent
    try:
        agent = resolve(ws, args.agent, None, {"max_steps": args.max_steps} if args.max_steps else None)
    except ValueError as exc:
        raise TeaError(str(exc)) from None
    model, _ = agent.resolved_model(args.model)
    log = None if args.json else _StepLog()
    stop = ws.events.subscribe(log) if log else None
    try:
        if log:
            print(f"tea run · agent {agent.name} · model {display_name(model)}", flush=True)
        result = agent.run_sync(args.task, model=args.model, raise_on_error=False)  # status and exit code below
    finally:
        if stop:
            stop()
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"\n{result.status}: {result.answer}")
        tokens = f"{result.prompt_tokens}+{result.completion_tokens} tokens"
        print(f"run {result.run_id} · {result.steps} steps · {tokens} · ${result.cost:.4f}")
    return 0 if result.success else 1


class _StepLog:
    """Prints a readable live log of a run from its events."""

    def __call__(self, event: "Event") -> None:
        d, depth = event.data, "  " if event.parent_id else ""
        if event.type == "run_started" and d.get("note"):
            print(f"{depth}note: {d['note']}", flush=True)
        elif event.type == "tool_call":
            args = json.dumps(d.get("arguments"), default=str)[:120]
            print(f"{depth}[{d['agent']} step {event.step}] {d['name']}({args})", flush=True)
        elif event.type == "tool_result":
            obs = " ".join(str(d.get("observation", "")).split())[:160]
            print(f"{depth}    {'->' if d.get('ok') else '!!'} {obs}", flush=True)
        elif event.type == "error":
            print(f"{depth}  error: {d.get('message')}", flush=True)


def cmd_eval(args: argparse.Namespace) -> int:
    from tea_notebook.eval.runner import evaluate

    ws = _workspace(args)
    if args.tasks in ("list", "show"):
        if args.tasks == "list":
            for r in ws.evaluations():
                print(f"{r['name']:32s} {r['tasks']:5d} tasks  {r['correct']:5d} correct  {r['errors']:4d} errors")
            return 0
        if not args.name:
            print("tea eval show needs --name", file=sys.stderr)
            return 2
        results = ws.evaluation(args.name)
        print(json.dumps(results.summary()) if args.json else results.text(limit=10_000))
        return 0
    tasks: Any = args.tasks
    if tasks == "sample":
        from tea_notebook.eval.datasets import sample_path

        tasks = sample_path()
    options = {k: getattr(args, k) for k in EVAL_OPTIONS}
    quiet = args.json or args.quiet
    results = evaluate(ws, args.agent, tasks, progress="off" if quiet else "auto", **options)
    if args.json:
        print(json.dumps(results.summary()))
    else:
        print(results.text(limit=args.show))
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    import datetime as dt

    rows = _workspace(args).runs(args.limit)
    for r in rows:
        when = dt.datetime.fromtimestamp(r["started"]).isoformat(timespec="seconds")
        print(f"{r['id']}  {when}  {r['status']:11s} {r['agent']:12s} {r['task'][:60]}")
    if not rows:
        print("(no runs yet)")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Preflight a model: reachable, authenticated, tool calls, JSON mode, context, latency, price."""
    from tea_notebook.eval.doctor import preflight
    from tea_notebook.models.client import resolve_model

    model = args.model or resolve_model(None, None, None)[0]
    report = preflight(model, api_base=args.api_base, timeout=args.timeout)
    print(json.dumps(report.to_dict()) if args.json else report.text())
    return 0 if report.ok else 1


def cmd_show(args: argparse.Namespace) -> int:
    print(_workspace(args).trajectory(args.run).text())
    return 0


def cmd_mcp_serve(args: argparse.Namespace) -> int:
    """``tea mcp serve``: the named tools and agents of a workspace, over stdio or streamable HTTP."""
    from tea_notebook._sync import run_sync
    from tea_notebook.envs.mcp_server import TOKEN_ENV, answered_hosts, check_bind, exports, http_token, serve

    token, source = None, ""
    if args.transport == "http":  # refused before the workspace is even opened
        check_bind(args.host, args.allow_remote, warn=False)  # serve() warns
        answered_hosts(args.host, args.port, args.allowed_host)
        token, source = http_token(args.token_env)
    elif args.token_env or args.allow_remote or args.allowed_host:
        raise TeaError("--token-env, --allow-remote and --allowed-host apply to --transport http only")
    ws = _workspace(args)
    tools = [t.strip() for t in (args.tools or "").split(",") if t.strip()]
    agents = [a.strip() for a in (args.agents or "").split(",") if a.strip()]
    try:
        exports(ws, tools, agents)  # what is missing is said before anything starts
        if source == "generated":  # shown once, here only; never logged
            print(
                f"tea mcp serve: clients must send 'Authorization: Bearer {token}' (a new token; set {TOKEN_ENV} "
                "or use --token-env NAME to choose one)",
                file=sys.stderr,
                flush=True,
            )
        elif source:
            print(f"tea mcp serve: clients must send the bearer token from ${source}", file=sys.stderr, flush=True)
        options = {"host": args.host, "port": args.port, "name": args.name, "token": token}
        options.update(allow_remote=args.allow_remote, allowed_hosts=args.allowed_host)
        run_sync(serve(ws, tools, agents, transport=args.transport, **options))
    except KeyboardInterrupt:
        return 130
    finally:
        ws.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tea``."""
    parser = argparse.ArgumentParser(prog="tea", description="tea_notebook: TEA registries from the shell")
    parser.add_argument("--workspace", "-w", default=".tea", help="workspace folder (default ./.tea)")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", "-w", default=argparse.SUPPRESS, help="workspace folder")
    sub = parser.add_subparsers(dest="command", required=True)
    _add = sub.add_parser

    def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        return _add(name, parents=[common], **kw)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    def kind_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kind", choices=["tools", "toolkits", "envs", "agents"], default="tools")

    for name in ("tools", "envs", "agents", "toolkits"):
        p = sub.add_parser(name, help=f"list {name}, or search them with a query")
        p.add_argument("query", nargs="?")
        p.add_argument("-k", type=int, default=5)
        p.add_argument("--mode", choices=["hybrid", "semantic", "keyword"], default="hybrid")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_list, kind=name)
    p = sub.add_parser("describe", help="describe one record")
    p.add_argument("name")
    kind_arg(p)
    p.set_defaults(func=cmd_describe)
    p = sub.add_parser("versions", help="list a record's versions")
    p.add_argument("name")
    kind_arg(p)
    p.set_defaults(func=cmd_versions)
    p = sub.add_parser("rollback", help="make an earlier version current")
    p.add_argument("name")
    p.add_argument("version", type=int)
    kind_arg(p)
    p.set_defaults(func=cmd_rollback)
    p = sub.add_parser("export", help="write the tool manifest")
    p.add_argument("path")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("import", help="merge a tool manifest")
    p.add_argument("path")
    p.add_argument("--trust-code", action="store_true", help="allow the manifest's code to run here")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("run", help="run an agent on a task (exit code 0 only when it succeeds)")
    p.add_argument("task")
    p.add_argument("--agent", default="agent", help="a registered agent, or a kind's shortcut (researcher, coral...)")
    p.add_argument("--model", default=None, help="a litellm model name, or tea/test, tea/demo, tea/replay:PATH")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print only the RunResult as JSON")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("eval", help="evaluate an agent on a task set (resumable: the same --name skips finished tasks)")
    p.add_argument(
        "tasks",
        help="GAIA metadata.jsonl or its folder, a JSONL / CSV of questions and answers, "
        "'sample', or 'list' / 'show' (stored evaluations)",
    )
    add_flags(p, "eval", "cli")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("runs", help="list past runs")
    add_flags(p, "runs", "cli")
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser(
        "doctor", help="preflight a model: key, tool calls, JSON mode, context, latency, price (exit 1 if not ready)"
    )
    add_flags(p, "doctor", "cli")
    p.set_defaults(func=cmd_doctor)
    p = sub.add_parser("show", help="print one run's trajectory")
    p.add_argument("run")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("demo", help="a guided tour of the TEA registries")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("notebooks", help="open the tutorial notebooks in JupyterLab, or run them headless (--headless)")
    p.add_argument("--headless", action="store_true", help="execute the quickstart and write it with an HTML copy")
    p.add_argument("--out", default="docs/_run", help="folder for --headless output (default docs/_run)")
    p.add_argument("lab_args", nargs=argparse.REMAINDER, help="after --: options for JupyterLab (--port 8899 ...)")
    p.set_defaults(func=cmd_notebooks)
    p = sub.add_parser("mcp", help="MCP: serve a workspace's tools and agents to MCP clients")
    mcp_sub = p.add_subparsers(dest="mcp_command", required=True)
    p = mcp_sub.add_parser("serve", parents=[common], help="serve the named tools and agents (A2T) over MCP")
    p.add_argument("--tools", default="", help="comma-separated tool names to export")
    p.add_argument("--agents", default="", help="comma-separated agent names to export as tools")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP only (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP only (default 8765); the endpoint is /mcp")
    p.add_argument("--name", default=None, help="the server's name (default: the workspace folder's)")
    p.add_argument(
        "--token-env",
        default=None,
        metavar="NAME",
        help="HTTP only: read the bearer token clients must send from $NAME (default $TEA_MCP_TOKEN, else a new "
        "token is printed once on stderr)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="HTTP only: allow a --host that is not loopback (reachable from other machines; the token is required)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="HTTP only: a name clients reach the server by, accepted in the Host header (repeatable)",
    )
    p.set_defaults(func=cmd_mcp_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tea`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TeaError as exc:
        print(f"tea: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
