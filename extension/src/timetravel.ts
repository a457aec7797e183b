/**
 * Time travel in the renderer, the DOM part: the Fork, "edit and fork" and "context" buttons of a
 * step, a ToolSelf stage and a CORAL message; a step's context (what the model saw) drawn under the
 * step; the "edit and fork" panel (the values to edit, in place, and how the fork's tools answer); the
 * toolbar's replay choice of the plain Fork; what a fork edited (the header's line, a step's chips and
 * its before/after) and where it departs from its original (the line under the header).
 *
 * The buttons show where the host can fork: a notebook's output, or a view the sidebar, the branches
 * table or an evaluation's table opened for a notebook (context.ts `bindNotebook`). Fork puts a
 * `%tea fork` line in a new cell below and runs it; "edit and fork" opens the step's observations and
 * actions (a message, a stage's fields) to edit here, and its Fork button inserts ONE cell with the
 * complete `await ws.fork(...)` call (the kernel writes it) and runs it, so the fork's view shows
 * there. The kernel answers over the sidebar's comm (`context`, `edit_targets`, `fork_cell`).
 * No JupyterLab import at run time (context.ts reaches the notebook): the benchmark page loads this.
 */

import { askKernel, insertCellBelow } from './context';
import { el } from './dom';
import {
  ForkAt,
  IEditTarget,
  REPLAY_CHOICES,
  ReplayChoice,
  IStepContext,
  contextShares,
  departureText,
  editSummary,
  editValue,
  editedValue,
  forkCellRequest,
  forkLine,
  messageForkRun,
  messageNumber,
  parseContextReply,
  parseEdit,
  parseEditTargets,
  parseForkCell,
  runIdAt,
  stageForkRun,
  stepForkRun,
  targetText
} from './forks';
import { IMessage, IStage, IStep, ITrajectory, Row, gist } from './model';
import type { IRowContext } from './views';

/** Parts drawn at most (a long run's history has one part per step); the rest are counted. */
const MAX_PARTS = 400;

interface IContextState {
  shown: boolean;
  loading: boolean;
  context?: IStepContext;
  error?: string;
  /** indices of the parts whose text is unfolded */
  open: Set<number>;
}

/** Each view's context panels by row key (the view's `expanded` set stands for the view). */
const panels = new WeakMap<Set<string>, Map<string, IContextState>>();

function stateOf(ctx: IRowContext, key: string, create = false): IContextState | undefined {
  let mine = panels.get(ctx.expanded);
  if (!mine) {
    mine = new Map();
    panels.set(ctx.expanded, mine);
  }
  let state = mine.get(key);
  if (!state && create) {
    state = { shown: false, loading: false, open: new Set() };
    mine.set(key, state);
  }
  return state;
}

function button(label: string, tea: string, title: string, act: (node: HTMLElement) => void): HTMLElement {
  const b = el('button', `tea-fork-btn tea-tt-${tea}`, label);
  b.title = title;
  b.setAttribute('data-tea', tea);
  b.addEventListener('click', ev => {
    ev.stopPropagation();
    act(b);
  });
  return b;
}

/** What an "edit and fork" panel holds while it is open (kept across redraws of its row). */
interface IEditState {
  shown: boolean;
  loading: boolean;
  busy: boolean;
  run: string;
  at: ForkAt;
  targets?: IEditTarget[];
  error?: string;
  /** the index of the target being edited */
  chosen: number;
  /** what the person typed, by target index */
  typed: Map<number, string>;
  /** how the fork's tools answer (a fork of an agent loop's steps); undefined: the fork takes no policy */
  replay?: ReplayChoice;
}

/** Each view's replay choice for its plain Fork buttons (the toolbar's picker), by the view's `expanded` set. */
const replays = new WeakMap<Set<string>, ReplayChoice>();

/** The replay choice of a view's plain Fork buttons (live unless the toolbar's picker says otherwise). */
export function replayOf(expanded: Set<string>): ReplayChoice {
  return replays.get(expanded) ?? 'live';
}

/** Whether a run's Fork buttons take a replay choice: the steps of an agent loop's finished run (a CORAL
 * team's or a ToolSelf run's fork takes no policy). */
export function takesReplay(traj: ITrajectory): boolean {
  return !traj.live && traj.forkable === 'steps';
}

/**
 * The toolbar's picker of how a plain Fork answers the tool calls it makes again (`--replay recorded`,
 * or live, today's default), each choice explained in its title; `changed` redraws the rows (their Fork
 * buttons say the choice).
 */
export function replayPicker(expanded: Set<string>, changed: () => void): HTMLElement {
  const wrap = el('label', 'tea-replay-pick');
  wrap.append(el('span', 'tea-muted', 'Fork with '));
  const select = el('select', 'tea-replay-select');
  select.setAttribute('data-tea', 'replay');
  for (const c of REPLAY_CHOICES) {
    const option = el('option', '', c.label);
    option.value = c.value;
    option.title = c.explain;
    option.selected = c.value === replayOf(expanded);
    select.append(option);
  }
  const explain = (): string => REPLAY_CHOICES.find(c => c.value === select.value)?.explain ?? '';
  wrap.title = `how a Fork answers the tool calls it makes again: ${explain()}`;
  select.addEventListener('change', () => {
    replays.set(expanded, select.value === 'recorded' ? 'recorded' : 'live');
    wrap.title = `how a Fork answers the tool calls it makes again: ${explain()}`;
    changed();
  });
  wrap.append(select);
  return wrap;
}

/** Each view's "edit and fork" panels by row key. */
const edits = new WeakMap<Set<string>, Map<string, IEditState>>();

function editStateOf(ctx: IRowContext, key: string): IEditState | undefined {
  return edits.get(ctx.expanded)?.get(key);
}

/** The view's root around `node`: it stays in the page while rows are drawn again. */
function anchorOf(node: HTMLElement): HTMLElement {
  return (node.closest('.tea-traj') as HTMLElement | null) ?? node;
}

/** Fork (puts the `%tea fork` line below and runs it; `policy`: with the view's replay choice) and
 * "edit and fork" (opens the values to edit under the row `key`, see `editPanel`). */
function forkButtons(
  run: string,
  at: ForkAt,
  what: string,
  key: string,
  ctx: IRowContext,
  policy = false
): HTMLElement[] {
  const replay = policy ? replayOf(ctx.expanded) : 'live';
  const fork = forkLine(run, at, false, replay);
  const open = editStateOf(ctx, key)?.shown;
  const tools = policy ? ` (${REPLAY_CHOICES.find(c => c.value === replay)!.label})` : '';
  const title = `insert "${fork}" below this cell and run it: ${what} again from here${tools}`;
  const forkButton = button('Fork', 'fork', title, node => {
    void insertCellBelow(node, forkLine(run, at, false, policy ? replayOf(ctx.expanded) : 'live'), true);
  });
  if (replay === 'recorded') {
    forkButton.classList.add('tea-fork-recorded');
  }
  return [
    forkButton,
    button(
      open ? 'close edit' : 'edit and fork',
      'edit-fork',
      'edit a value here (an observation, the actions, a message, a stage), then Fork: one cell runs the fork below',
      node => toggleEdit(key, run, at, ctx, node, policy)
    )
  ];
}

function toggleEdit(key: string, run: string, at: ForkAt, ctx: IRowContext, node: HTMLElement, policy: boolean): void {
  let mine = edits.get(ctx.expanded);
  if (!mine) {
    mine = new Map();
    edits.set(ctx.expanded, mine);
  }
  let state = mine.get(key);
  if (!state) {
    state = { shown: false, loading: false, busy: false, run, at, chosen: 0, typed: new Map() };
    mine.set(key, state);
  }
  if (policy && state.replay === undefined) {
    state.replay = replayOf(ctx.expanded); // the toolbar's choice, to change in the panel
  }
  state.shown = !state.shown;
  if (state.shown && !state.targets && !state.loading) {
    state.loading = true;
    state.error = undefined;
    const where = 'stage' in at ? { stage: at.stage } : { step: at.step };
    const st = state;
    void askKernel(anchorOf(node), { request: 'edit_targets', run, ...where }, ['edit_targets']).then(reply => {
      st.loading = false;
      const parsed = parseEditTargets(reply);
      if (parsed.ok) {
        st.targets = parsed.targets;
      } else {
        st.error = parsed.error;
      }
      ctx.remeasure(key);
    });
  }
  ctx.remeasure(key);
}

/** The "edit and fork" panel under a step, stage or message whose button is on (null when off): a
 * choice of what to edit, the value in a text box, and Fork, which asks the kernel for the one cell
 * that forks with the edit, inserts it below and runs it. */
export function editPanel(key: string, ctx: IRowContext): HTMLElement | null {
  const state = editStateOf(ctx, key);
  if (!state?.shown) {
    return null;
  }
  const box = el('div', 'tea-ctx tea-edit-fork');
  box.setAttribute('data-tea', 'edit-panel');
  box.addEventListener('click', ev => ev.stopPropagation());
  const where = 'stage' in state.at ? `stage ${state.at.stage}` : `step ${state.at.step}`;
  const head = el('div', 'tea-ctx-head');
  head.append(
    el('b', '', `edit and fork at ${where}`),
    el('span', 'tea-muted', 'Fork runs the fork in one new cell below')
  );
  box.append(head);
  if (state.loading) {
    box.append(el('div', 'tea-muted', 'asking the kernel for the values…'));
    return box;
  }
  const targets = state.targets ?? [];
  if (targets.length) {
    const chosen = Math.min(state.chosen, targets.length - 1);
    const target = targets[chosen];
    const pick = el('div', 'tea-edit-pick');
    pick.append(el('span', 'tea-muted', 'edit: '));
    if (targets.length > 1) {
      const select = el('select', 'tea-edit-target');
      select.setAttribute('data-tea', 'edit-target');
      targets.forEach((t, i) => {
        const option = el('option', '', t.label);
        option.value = String(i);
        option.selected = i === chosen;
        select.append(option);
      });
      select.addEventListener('change', () => {
        state.chosen = Number(select.value);
        state.error = undefined;
        ctx.remeasure(key);
      });
      pick.append(select);
    } else {
      pick.append(el('span', 'tea-edit-target', target.label));
    }
    box.append(pick);
    const typed = state.typed.get(chosen) ?? targetText(target);
    const area = el('textarea', 'tea-edit-value');
    area.setAttribute('data-tea', 'edit-value');
    area.value = typed;
    area.rows = Math.min(14, Math.max(3, typed.split('\n').length + 1));
    area.spellcheck = false;
    area.addEventListener('input', () => state.typed.set(chosen, area.value));
    box.append(area);
    if (state.replay !== undefined) {
      box.append(replayChoice(key, state));
    }
    const go = button(
      'Fork with this edit',
      'edit-fork-go',
      'insert one cell below with the fork call and run it',
      node => forkWithEdit(key, state, target, area.value, ctx, node)
    );
    go.classList.add('tea-edit-go');
    if (state.busy) {
      go.setAttribute('disabled', '');
      go.textContent = 'forking…';
    }
    box.append(go);
  }
  if (state.error) {
    const err = el('div', 'tea-err', state.error);
    err.setAttribute('data-tea', 'edit-error');
    box.append(err);
  }
  return box;
}

/** The panel's choice of how the fork's tools answer: a radio per choice, each with its explanation. */
function replayChoice(key: string, state: IEditState): HTMLElement {
  const box = el('div', 'tea-edit-replay');
  box.setAttribute('data-tea', 'edit-replay');
  box.append(el('span', 'tea-muted', 'the tools after the fork point:'));
  for (const c of REPLAY_CHOICES) {
    const line = el('label', 'tea-edit-replay-choice');
    const radio = el('input');
    radio.type = 'radio';
    radio.name = `tea-replay-${key}`;
    radio.value = c.value;
    radio.checked = state.replay === c.value;
    radio.setAttribute('data-replay', c.value);
    radio.addEventListener('change', () => {
      if (radio.checked) {
        state.replay = c.value;
      }
    });
    line.append(radio, el('b', '', ` ${c.value}`), el('span', 'tea-muted', ` — ${c.explain}`));
    box.append(line);
  }
  return box;
}

function forkWithEdit(
  key: string,
  state: IEditState,
  target: IEditTarget,
  typed: string,
  ctx: IRowContext,
  node: HTMLElement
): void {
  const value = editedValue(target, typed);
  if (!value.ok) {
    state.error = value.error;
    ctx.remeasure(key);
    return;
  }
  const anchor = anchorOf(node);
  state.busy = true;
  state.error = undefined;
  node.setAttribute('disabled', '');
  node.textContent = 'forking…';
  const request = forkCellRequest(state.run, state.at, target, value.value, state.replay);
  void askKernel(anchor, request, ['fork_cell']).then(async reply => {
    state.busy = false;
    const cell = parseForkCell(reply);
    if (!cell.ok) {
      state.error = cell.error;
    } else if (await insertCellBelow(anchor, cell.code, true)) {
      state.shown = false; // the fork runs in the cell below; "edit and fork" opens the panel again
    } else {
      state.error = 'this view has no notebook to put the fork cell in';
    }
    ctx.remeasure(key);
  });
}

/** The buttons of a step card's head: Fork and "edit and fork" where a fork works, and "context". */
export function stepButtons(row: Extract<Row, { kind: 'step' }>, ctx: IRowContext): HTMLElement[] {
  if (!ctx.host.fork || ctx.traj.live) {
    return []; // not a notebook's output, or the run still goes
  }
  const out: HTMLElement[] = [];
  const forkRun = row.stage === undefined ? stepForkRun(ctx.traj, ctx.meta, row.path) : null;
  if (forkRun) {
    out.push(...forkButtons(forkRun, { step: row.step.number }, 'the run', row.key, ctx, true));
  }
  const run = runIdAt(ctx.meta, row.path);
  if (run) {
    const state = stateOf(ctx, row.key);
    const b = button(
      state?.shown ? 'hide context' : 'context',
      'context',
      'what the model saw at this step: each part of its prompt, its size, what is new since the step before',
      () => toggleContext(row.key, run, row.step.number, ctx, b)
    );
    out.push(b);
  }
  return out;
}

/** A ToolSelf stage's Fork buttons (`%tea fork RUN --stage K`); `key`: its row's. */
export function stageButtons(stage: IStage, key: string, ctx: IRowContext): HTMLElement[] {
  const run = ctx.host.fork ? stageForkRun(ctx.traj, ctx.meta) : null;
  return run ? forkButtons(run, { stage: stage.index }, `stage ${stage.index}`, key, ctx) : [];
}

/** A CORAL message's Fork buttons (`%tea fork RUN --step N`, N the message's number); `key`: its row's. */
export function messageButtons(message: IMessage, key: string, ctx: IRowContext): HTMLElement[] {
  const run = ctx.host.fork ? messageForkRun(ctx.traj, ctx.meta, message) : null;
  const n = messageNumber(ctx.traj, message.seq);
  return run && n > 0 ? forkButtons(run, { step: n }, `the team from message ${n}`, key, ctx) : [];
}

function toggleContext(key: string, run: string, step: number, ctx: IRowContext, node: HTMLElement): void {
  const state = stateOf(ctx, key, true)!;
  state.shown = !state.shown;
  if (state.shown && !state.context && !state.loading) {
    state.loading = true;
    state.error = undefined;
    void askKernel(anchorOf(node), { request: 'context', run, step, stage: '' }, ['context']).then(reply => {
      state.loading = false;
      const parsed = parseContextReply(reply);
      if (parsed.ok) {
        state.context = parsed.context;
      } else {
        state.error = parsed.error;
      }
      ctx.remeasure(key);
    });
  }
  ctx.remeasure(key);
}

/** The context panel under a step whose "context" button is on (null when it is off). */
export function contextPanel(row: Extract<Row, { kind: 'step' }>, ctx: IRowContext): HTMLElement | null {
  const state = stateOf(ctx, row.key);
  if (!state?.shown) {
    return null;
  }
  const box = el('div', 'tea-ctx');
  box.setAttribute('data-tea', 'context-panel');
  box.addEventListener('click', ev => ev.stopPropagation());
  if (state.loading) {
    box.append(el('div', 'tea-muted', 'asking the kernel what the model saw…'));
    return box;
  }
  if (state.error !== undefined || !state.context) {
    const err = el('div', 'tea-err', state.error ?? 'no context');
    err.setAttribute('data-tea', 'context-error');
    box.append(err);
    return box;
  }
  const c = state.context;
  const head = el('div', 'tea-ctx-head');
  head.append(
    el('b', '', `context of step ${c.step ?? '?'}${c.stage ? ` (${c.stage})` : ''}`),
    el('span', '', `${c.chars.toLocaleString()} characters`)
  );
  if (c.previous_step !== null) {
    head.append(el('span', 'tea-muted', `new since step ${c.previous_step} marked`));
  }
  const bar = el('div', 'tea-ctx-bar');
  const legend = el('div', 'tea-ctx-legend tea-muted');
  for (const s of contextShares(c)) {
    const seg = el('span', `tea-ctx-seg tea-kind-${s.kind.replace(/[^a-z]/g, '')}`);
    seg.style.width = `${Math.max(0.5, s.share * 100)}%`;
    seg.title = `${s.kind}: ${s.chars.toLocaleString()} characters`;
    bar.append(seg);
    const item = el('span', 'tea-ctx-size', `${s.kind} ${s.chars.toLocaleString()}`);
    item.setAttribute('data-kind', s.kind);
    item.prepend(el('span', `tea-ctx-swatch tea-kind-${s.kind.replace(/[^a-z]/g, '')}`)); // the legend: kind → colour
    legend.append(item);
  }
  box.append(head, bar, legend);
  if (c.clipped) {
    box.append(el('div', 'tea-err', 'an image of this request was too large to keep'));
  }
  c.parts.slice(0, MAX_PARTS).forEach((p, i) => {
    const part = el('details', `tea-ctx-part${p.changed ? ' tea-ctx-new' : ''}`);
    part.setAttribute('data-kind', p.kind);
    part.open = state.open.has(i);
    const summary = el('summary');
    if (p.changed) {
      const mark = el('span', 'tea-chip tea-ctx-newmark', 'new');
      mark.title = `not in the request of step ${c.previous_step ?? 'before'}`;
      summary.append(mark);
    }
    summary.append(
      el('b', 'tea-ctx-kind', p.kind),
      el('span', 'tea-muted', ` (${p.role}, ${p.chars.toLocaleString()} chars) `),
      el('span', 'tea-ctx-gist', p.summary ?? gist(p.text, 100))
    );
    part.append(summary, el('pre', 'tea-ctx-text', p.clipped ? `${p.text}\n[clipped here]` : p.text));
    part.addEventListener('toggle', () => {
      if (part.open === state.open.has(i)) {
        return; // drawn open: not a person's toggle
      }
      if (part.open) {
        state.open.add(i);
      } else {
        state.open.delete(i);
      }
      ctx.remeasure(row.key);
    });
    box.append(part);
  });
  if (c.parts.length > MAX_PARTS) {
    box.append(el('div', 'tea-muted', `… ${c.parts.length - MAX_PARTS} more parts (%tea context shows them all)`));
  }
  for (const r of c.removed) {
    box.append(el('div', 'tea-muted tea-ctx-removed', `removed since step ${c.previous_step}: ${r.text}`));
  }
  if (c.tools.length) {
    box.append(el('div', 'tea-muted', `tools offered: ${c.tools.join(', ')}`));
  }
  return box;
}

/** A step's chips for what a fork did there: "edited" (what, in its title) and the fork's note. */
export function editChips(step: IStep): HTMLElement[] {
  const out: HTMLElement[] = [];
  const edit = parseEdit(step.edited);
  if (edit) {
    const chip = el('span', 'tea-chip tea-edited', 'edited');
    chip.title = editSummary(edit);
    chip.setAttribute('data-tea', 'edited');
    out.push(chip);
  }
  if (step.note) {
    const chip = el('span', 'tea-chip tea-note', step.note);
    chip.setAttribute('data-tea', 'note');
    out.push(chip);
  }
  return out;
}

/** In an open step card: what the fork's edit replaced (struck through) and put in. */
export function editedDetail(step: IStep): HTMLElement | null {
  const edit = parseEdit(step.edited);
  if (!edit) {
    return null;
  }
  const box = el('div', 'tea-edit-detail');
  box.setAttribute('data-tea', 'edit-detail');
  box.append(el('div', 'tea-muted', editSummary(edit)));
  const before = editValue(edit.before);
  if (before) {
    const was = el('div', 'tea-edit-before');
    was.append(el('span', 'tea-muted', 'was: '), el('s', '', before));
    box.append(was);
  }
  const after = editValue(edit.after);
  if (after) {
    const now = el('div', 'tea-edit-after');
    now.append(el('span', 'tea-muted', 'now: '), document.createTextNode(after));
    box.append(now);
  }
  return box;
}

/** The header's line for a fork's edit ("edited: the observation of action 1 (work) of step 3"), or null. */
export function editHeader(traj: ITrajectory): HTMLElement | null {
  const edit = parseEdit(traj.edit);
  if (!edit) {
    return null;
  }
  const node = el('span', 'tea-edit-link', editSummary(edit));
  node.setAttribute('data-tea', 'edit');
  const before = editValue(edit.before);
  const after = editValue(edit.after);
  if (before || after) {
    node.title = `${before ? `was: ${before.slice(0, 400)}` : ''}${before && after ? '\n' : ''}${after ? `now: ${after.slice(0, 400)}` : ''}`;
  }
  return node;
}

/**
 * The line under a fork's header that says how it compares with its original: "departs from RUN at step
 * 4: different model input" (what the original and the replay did there in its title, and unfolded by a
 * click), or "reproduces RUN so far" / "reproduced RUN"; null for a run that is no compared fork. `open`:
 * whether the comparison is unfolded (the view keeps it across live updates; `toggled` tells it).
 */
export function departureLine(traj: ITrajectory, open: boolean, toggled: (open: boolean) => void): HTMLElement | null {
  const d = traj.divergence;
  if (!d) {
    return null;
  }
  const text = departureText(d, traj.live === true);
  if (d.step === undefined) {
    const same = el('div', 'tea-departure tea-reproduces', text);
    same.setAttribute('data-tea', 'departure');
    const what = d.unit === 'message' ? 'the same senders, recipients and texts' : 'the same model input, actions, arguments and observations';
    same.title = `each ${d.unit} after the fork point ${traj.live ? 'so far ' : ''}is as in ${d.source}: ${what}`;
    return same;
  }
  const box = el('details', 'tea-departure tea-departs');
  box.setAttribute('data-tea', 'departure');
  box.open = open;
  box.title = `original: ${d.original ?? ''}\nreplay: ${d.replay ?? ''}`;
  const summary = el('summary', '', text);
  const body = el('div', 'tea-departure-body');
  for (const [label, value, tea] of [
    [`original (${d.source})`, d.original, 'departure-original'],
    ['this replay', d.replay, 'departure-replay']
  ] as const) {
    const row = el('div', 'tea-departure-row');
    row.setAttribute('data-tea', tea);
    row.append(el('span', 'tea-muted', `${label}: `), el('code', '', value ?? ''));
    body.append(row);
  }
  box.append(summary, body);
  box.addEventListener('toggle', () => toggled(box.open));
  return box;
}
