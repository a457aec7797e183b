"""How the results of self-evolution display in a notebook: a tool manager's
:class:`~tea_notebook.evolve.toolmaker.Creation` (status, each candidate's code, tests and their
output, the reason it was registered or discarded, and in approval mode what to call next), a
Mem²Evolve :class:`~tea_notebook.evolve.loop.EvolutionResult` (sub-tasks, recruited agents and tools,
the judge's verdict, validations, experience written) and the tool statistics
(:class:`~tea_notebook.evolve.stats.ToolStats`).

The renderers are plain functions of the objects (:func:`creation_html`, :func:`creation_text`,
:func:`evolution_html`, :func:`stats_html`, :func:`stats_text`); every generated text is escaped.
:func:`register_formatters` (called by ``%load_ext tea_notebook``) makes IPython use them for those
types, registered by name, so nothing of the evolve package is imported before it is used.
"""

from __future__ import annotations

from typing import Any

from tea_notebook.runtime.render import CSS, esc

_COLOUR = {
    "registered": "#1a7f37",
    "reused": "#1a7f37",
    "native": "#0969da",
    "pending": "#9a6700",
    "discarded": "#cf222e",
    "validating": "#0969da",
}

_STYLE = (
    "<style>.tea-cr .cand{border-left:3px solid #d0d7de;padding:2px 8px;margin:8px 0}"
    ".tea-cr .lbl{margin-top:4px;color:#57606a}.tea-cr .todo{border:1px solid #d4a72c;background:#fff8c5;"
    "border-radius:6px;padding:4px 8px;margin:4px 0}.tea-cr table{border-collapse:collapse;font-size:inherit}"
    ".tea-cr td,.tea-cr th{padding:1px 10px 1px 0;vertical-align:top;text-align:left}</style>"
)


def _model_of(creation: Any) -> str:
    """The model the tool manager ran with (from its stored run), as people read it."""
    from tea_notebook.models.client import display_name

    maker = getattr(creation, "maker", None)
    ws = getattr(maker, "ws", None)
    row = None
    if ws is not None and getattr(creation, "run_id", ""):
        try:
            row = ws.db.run_row(creation.run_id)
        except Exception:  # noqa: BLE001 - a closed workspace: show what the maker knows
            row = None
    model = (row or {}).get("model") or getattr(maker, "model", None) or ""
    return display_name(model) if model else ""


def _outcome(cand: Any) -> str:
    """``first pass`` / ``after 2 fixes`` / ``waiting for approval`` …"""
    fixes = cand.fix_iterations
    if cand.status == "pending":
        return "passed, waiting for approval"
    if cand.status == "registered":
        how = "on the first pass" if cand.first_pass else f"after {fixes} fix{'es' if fixes != 1 else ''}"
        return f"passed {how}"
    if cand.status == "discarded":
        return f"discarded after {fixes} fix{'es' if fixes != 1 else ''}"
    return cand.status


def approval_hint(creation: Any, var: str = "creation") -> list[str]:
    """What to call for each candidate waiting for approval (empty when none waits)."""
    lines = []
    for i, cand in enumerate(creation.candidates):
        if cand.status == "pending":
            ref = f"{var}.candidates[{i}]"
            lines.append(f'{cand.name}: {ref}.accept()  or  {ref}.edit(code)  or  {ref}.reject("why")')
    return lines


def creation_text(creation: Any) -> str:
    """The creation as text: the summary, the model and, in approval mode, what to call."""
    lines = creation.summary().splitlines()
    model = _model_of(creation)
    if model:
        lines.insert(1, f"  model: {model}")
    hints = approval_hint(creation)
    if hints:
        lines.append("waiting for approval (the code passed its tests in the sandbox and is not registered yet):")
        lines += [f"  {h}" for h in hints]
        lines.append("  (creation = the value of this cell, e.g. creation = _ in the next cell)")
    return "\n".join(lines)


def _candidate_html(index: int, cand: Any) -> str:
    colour = _COLOUR.get(cand.status, "#57606a")
    version = f" v{cand.tool.version}" if getattr(cand, "tool", None) is not None else ""
    parts = [
        f"<div class='cand'><div><b><code>{esc(cand.name)}</code>{esc(version)}</b> "
        f"<span class='st' style='color:{colour}'>{esc(cand.status)}</span> "
        f"<span class='muted'>· {esc(_outcome(cand))}</span></div>"
    ]
    description = (cand.spec or {}).get("tool_description") if isinstance(cand.spec, dict) else None
    if description:
        parts.append(f"<div>{esc(description)}</div>")
    if cand.reason:
        parts.append(f"<div class='err'>reason: {esc(cand.reason)}</div>")
    if cand.status == "pending":
        ref = f"creation.candidates[{index}]"
        parts.append(
            "<div class='todo'><b>Waiting for your approval.</b> The code passed its tests in the sandbox and is "
            "not registered yet. With <code>creation</code> this result (<code>creation = _</code> in the next "
            "cell, or <code>creation = %tea create-tool --manual …</code>):"
            f"<div><code>{esc(ref)}.accept()</code> registers it,</div>"
            f"<div><code>{esc(ref)}.edit(code)</code> replaces the code (validated again),</div>"
            f'<div><code>{esc(ref)}.reject("why")</code> discards it, recording why.</div></div>'
        )
    for label, text in (("code", cand.code), ("tests", cand.tests), ("test output", cand.test_output)):
        if text:
            parts.append(f"<div class='lbl'>{label}</div><pre>{esc(text)}</pre>")
    parts.append("</div>")
    return "".join(parts)


def creation_html(creation: Any) -> str:
    """The creation as self-contained, escaped HTML."""
    colour = _COLOUR.get(creation.status, "#57606a")
    model = _model_of(creation)
    head = (
        f"<div class='h'><span class='st' style='color:{colour}'>{esc(creation.status)}</span>"
        "<span><b>tool manager</b></span>"
        + (f"<span class='muted'>{esc(model)}</span>" if model else "")
        + f"<span class='muted'>run {esc(creation.run_id)}</span></div>"
    )
    parts = [CSS, _STYLE, "<div class='tea-t tea-cr'>", head]
    parts.append(f"<div><span class='muted'>request:</span> {esc(creation.request)}</div>")
    justification = (creation.need or {}).get("justification") if isinstance(creation.need, dict) else None
    if justification:
        parts.append(f"<div><span class='muted'>need:</span> {esc(justification)}</div>")
    if creation.reused:
        names = ", ".join(f"<code>{esc(n)}</code>" for n in creation.reused)
        parts.append(f"<div><span class='muted'>reused existing tools:</span> {names}</div>")
    elif creation.status == "native":
        parts.append("<div class='muted'>no tool needed: the model can do this itself</div>")
    parts += [_candidate_html(i, c) for i, c in enumerate(creation.candidates)]
    parts.append("</div>")
    return "".join(parts)


def creation_bundle(creation: Any) -> dict[str, str]:
    """``{"text/plain", "text/html"}`` of a creation."""
    return {"text/plain": creation_text(creation), "text/html": creation_html(creation)}


# -- a Mem²Evolve task ---------------------------------------------------------------------------------
def _run_model(workspace: Any, run_id: str) -> str:
    from tea_notebook.models.client import display_name

    try:
        row = workspace.db.run_row(run_id) if workspace is not None and run_id else None
    except Exception:  # noqa: BLE001 - a closed workspace
        row = None
    return display_name(row["model"]) if row and row.get("model") else ""


def evolution_pending(result: Any, var: str = "result") -> list[str]:
    """What to call for tools and fixed versions that wait for approval (``approval="manual"``)."""
    lines = []
    for i, sub in enumerate(result.subtasks):
        creation = getattr(sub.recruit, "creation", None)
        for j, cand in enumerate(getattr(creation, "candidates", None) or []):
            if cand.status == "pending":
                ref = f"{var}.subtasks[{i}].recruit.creation.candidates[{j}]"
                lines.append(f'new tool {cand.name}: {ref}.accept() / .edit(code) / .reject("why")')
    for k, v in enumerate(result.validations):
        if v.status == "pending":
            lines.append(f'fixed version of {v.tool}: {var}.validations[{k}].accept() / .reject("why")')
    return lines


def evolution_html(result: Any) -> str:
    """A Mem²Evolve task as self-contained, escaped HTML: verdict, answer, sub-tasks with their agents,
    tools and retrieved experiences, assets created and reused, validations, the judge's critique and
    the experience written."""
    judgement = result.judgement
    verdict = "success" if result.success else "failure"
    colour = "#1a7f37" if result.success else "#cf222e"
    model = _run_model(result.workspace, result.run_id)
    head = (
        f"<div class='h'><span class='st' style='color:{colour}'>{verdict}</span><span><b>mem2evolve</b></span>"
        + (f"<span class='muted'>{esc(model)}</span>" if model else "")
        + f"<span class='muted'>run {esc(result.run_id)}</span></div>"
    )
    parts = [CSS, _STYLE, "<div class='tea-t tea-cr'>", head]
    parts.append(f"<div><span class='muted'>task:</span> {esc(result.task)}</div>")
    parts.append(f"<div><span class='muted'>answer:</span> <b>{esc(result.answer)}</b></div>")
    if judgement.ground_truth is not None:
        match = "the answer matches it" if judgement.success else "the answer does not match it"
        said = "completed" if judgement.judge_completed else "not completed"
        parts.append(
            f"<div><span class='muted'>ground truth:</span> {esc(judgement.ground_truth)} "
            f"<span class='muted'>({match}; the judge said {said})</span></div>"
        )
    rows = []
    for sub in result.subtasks:
        recruit = sub.recruit
        agent = f"{recruit.spec.role} ({'new' if recruit.agent_created else 'from the bank'})"
        rows.append(
            "<tr>"
            f"<td>{sub.subtask.number}</td><td>{esc(sub.subtask.description)}</td><td>{esc(agent)}</td>"
            f"<td>{esc(', '.join(recruit.tools) or '—')}</td><td>{esc(', '.join(sub.tools_used) or '—')}</td>"
            f"<td>{esc(', '.join(sub.experiences) or '—')}</td><td>{esc(sub.status)}</td>"
            f"<td>{esc(sub.answer)}</td></tr>"
        )
    parts.append(
        "<div class='lbl'>sub-tasks</div><table class='tea-rb'><thead><tr><th>#</th><th>sub-task</th><th>agent</th>"
        "<th>tools offered</th><th>tools used</th><th>experience retrieved</th><th>status</th><th>answer</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    assets = [
        ("tools created", result.created_tools),
        ("tools reused", result.reused_tools),
        ("agents created", result.new_agents),
    ]
    asset_rows = "".join(
        f"<tr><td class='muted'>{label}</td><td>{', '.join(f'<code>{esc(n)}</code>' for n in names) or '—'}</td></tr>"
        for label, names in assets
    )
    parts.append(f"<table>{asset_rows}</table>")
    for sub in result.subtasks:
        creation = getattr(sub.recruit, "creation", None)
        if creation is not None and creation.candidates:
            parts.append(
                f"<details><summary>tool manager for sub-task {sub.subtask.number}: {esc(creation.status)}</summary>"
                + "".join(_candidate_html(i, c) for i, c in enumerate(creation.candidates))
                + "</details>"
            )
    quality = f" ({judgement.quality})" if judgement.quality else ""
    parts.append(f"<div class='lbl'>judge{esc(quality)}</div><div>{esc(judgement.assessment)}</div>")
    for v in result.validations:
        version = f" v{v.version}" if v.version is not None else ""
        fixes = f" after {v.fix_iterations} fixes" if v.fix_iterations else ""
        why = f" — {v.reason}" if v.reason else ""
        body = "".join(
            f"<div class='lbl'>{label}</div><pre>{esc(text)}</pre>"
            for label, text in (("tests from the critique", v.tests), ("test output", v.output))
            if text
        )
        parts.append(
            f"<details><summary>validated <code>{esc(v.tool)}</code>{esc(version)}: "
            f"<b>{esc(v.status)}</b>{esc(fixes)}{esc(why)}</summary>{body}</details>"
        )
    if result.experiences:
        merged = set(getattr(result.trace, "merged", []) or [])
        items = "".join(
            f"<li><b>{esc(e.kind)}</b>: {esc(e.title)}"
            + (" <span class='muted'>(merged into an existing entry)</span>" if e.name in merged else "")
            + "</li>"
            for e in result.experiences
        )
        parts.append(f"<div class='lbl'>experience written</div><ul>{items}</ul>")
    pending = evolution_pending(result)
    if pending:
        hints = "".join(f"<div><code>{esc(h)}</code></div>" for h in pending)
        parts.append(
            "<div class='todo'><b>Waiting for your approval</b> (with <code>result</code> this value, e.g. "
            f"<code>result = _</code>):{hints}</div>"
        )
    parts.append("</div>")
    return "".join(parts)


# -- tool statistics ------------------------------------------------------------------------------
def stats_rows(stats: Any) -> list[tuple[str, str]]:
    """``(label, value)`` pairs of the tool statistics, in display order."""
    return [
        ("tools created", f"{stats.created}"),
        ("registrations (new versions included)", f"{stats.versions}"),
        ("discarded", f"{stats.discarded}"),
        ("reuse rate", f"{stats.reuse_rate:.0%} ({stats.reused_tools} of {stats.created} created tools used again)"),
        ("requests met by existing tools", f"{stats.reuse_decisions}"),
        ("first-pass validity", f"{stats.first_pass_validity:.0%}"),
        ("mean fix iterations", f"{stats.mean_fix_iterations:.2f}"),
    ]


def stats_text(stats: Any) -> str:
    """The statistics as aligned text lines."""
    rows = stats_rows(stats)
    width = max(len(label) for label, _ in rows)
    return "tool statistics\n" + "\n".join(f"  {label:<{width}}  {value}" for label, value in rows)


def stats_html(stats: Any) -> str:
    """The statistics as a small escaped HTML table."""
    body = "".join(
        f"<tr><td class='muted'>{esc(label)}</td><td>{esc(value)}</td></tr>" for label, value in stats_rows(stats)
    )
    return f"{CSS}{_STYLE}<div class='tea-t tea-cr'><b>tool statistics</b><table>{body}</table></div>"


__all__ = [
    "approval_hint",
    "creation_bundle",
    "creation_html",
    "creation_text",
    "evolution_html",
    "evolution_pending",
    "stats_html",
    "stats_rows",
    "stats_text",
]
