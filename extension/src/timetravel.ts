/**
 * Time travel in the renderer, the DOM part: the Fork, "edit and fork" and "context" buttons of a
 * step, a ToolSelf stage and a CORAL message; a step's context (what the model saw) drawn under the
 * step; and what a fork edited (the header's line, a step's chips and its before/after).
 *
 * The buttons show only in a notebook's output (the host can fork): they put a `%tea fork` line in a
 * new cell below (Fork runs it; "edit and fork" leaves it to run, and running it prefills the cell
 * to edit). The context comes from the kernel over the sidebar's comm (`{"request": "context"}`).
 * No JupyterLab import at run time (context.ts reaches the notebook): the benchmark page loads this.
 */

import { insertCellBelow, kernelFor } from './context';
import { el } from './dom';
import {
  ForkAt,
  IStepContext,
  contextShares,
  editSummary,
  editValue,
  forkLine,
  messageForkRun,
  messageNumber,
  parseContextReply,
  parseEdit,
  runIdAt,
  stageForkRun,
  stepForkRun
} from './forks';
import { IMessage, IStage, IStep, ITrajectory, Row, gist } from './model';
import type { IRowContext } from './views';

/** The kernel's comm target that answers `context` requests (tea_notebook.notebook.sidebar_comm). */
const SIDEBAR_COMM = 'tea_notebook.sidebar';
/** Seconds to wait for the kernel's answer (it answers once the cell it runs has ended). */
const CONTEXT_TIMEOUT = 60;
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

/** Fork (puts the `%tea fork` line below and runs it) and "edit and fork" (puts `... --edit` below). */
function forkButtons(run: string, at: ForkAt, what: string): HTMLElement[] {
  const fork = forkLine(run, at);
  const edit = forkLine(run, at, true);
  return [
    button('Fork', 'fork', `insert "${fork}" below this cell and run it: ${what} again from here`, node => {
      void insertCellBelow(node, fork, true);
    }),
    button(
      'edit and fork',
      'edit-fork',
      `insert "${edit}" below this cell: running it puts a cell with the value to edit (then run that one)`,
      node => {
        void insertCellBelow(node, edit, false);
      }
    )
  ];
}

/** The buttons of a step card's head: Fork and "edit and fork" where a fork works, and "context". */
export function stepButtons(row: Extract<Row, { kind: 'step' }>, ctx: IRowContext): HTMLElement[] {
  if (!ctx.host.fork || ctx.traj.live) {
    return []; // not a notebook's output, or the run still goes
  }
  const out: HTMLElement[] = [];
  const forkRun = row.stage === undefined ? stepForkRun(ctx.traj, ctx.meta, row.path) : null;
  if (forkRun) {
    out.push(...forkButtons(forkRun, { step: row.step.number }, 'the run'));
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

/** A ToolSelf stage's Fork buttons (`%tea fork RUN --stage K`). */
export function stageButtons(stage: IStage, ctx: IRowContext): HTMLElement[] {
  const run = ctx.host.fork ? stageForkRun(ctx.traj, ctx.meta) : null;
  return run ? forkButtons(run, { stage: stage.index }, `stage ${stage.index}`) : [];
}

/** A CORAL message's Fork buttons (`%tea fork RUN --step N`, N the message's number). */
export function messageButtons(message: IMessage, ctx: IRowContext): HTMLElement[] {
  const run = ctx.host.fork ? messageForkRun(ctx.traj, ctx.meta, message) : null;
  const n = messageNumber(ctx.traj, message.seq);
  return run && n > 0 ? forkButtons(run, { step: n }, `the team from message ${n}`) : [];
}

function toggleContext(key: string, run: string, step: number, ctx: IRowContext, node: HTMLElement): void {
  const state = stateOf(ctx, key, true)!;
  state.shown = !state.shown;
  if (state.shown && !state.context && !state.loading) {
    state.loading = true;
    state.error = undefined;
    void requestContext(node, run, step).then(reply => {
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

/** Ask the kernel of the notebook holding `node` what the model saw at a step (one comm per request). */
function requestContext(node: HTMLElement, run: string, step: number): Promise<unknown> {
  const kernel = kernelFor(node);
  if (!kernel) {
    return Promise.resolve({ type: 'error', message: 'no kernel for this notebook' });
  }
  return new Promise(resolve => {
    let comm: ReturnType<typeof kernel.createComm>;
    let done = false;
    const finish = (reply: unknown): void => {
      if (done) {
        return;
      }
      done = true;
      window.clearTimeout(timer);
      resolve(reply);
      try {
        comm.close();
      } catch {
        /* closed already, or the kernel is gone */
      }
    };
    const timer = window.setTimeout(
      () => finish({ type: 'error', message: `the kernel did not answer within ${CONTEXT_TIMEOUT} s (is it busy?)` }),
      CONTEXT_TIMEOUT * 1000
    );
    try {
      comm = kernel.createComm(SIDEBAR_COMM);
    } catch (e) {
      finish({ type: 'error', message: `cannot ask the kernel: ${(e as Error).message}` });
      return;
    }
    comm.onMsg = msg => {
      const data = msg.content.data as Record<string, unknown>;
      if (data.type === 'context' || (data.type === 'error' && (data.request === 'context' || !data.request))) {
        finish(data);
      } // a 'state' push (the sidebar's) is not for us
    };
    comm.onClose = () =>
      finish({ type: 'error', message: 'the kernel has no tea_notebook comm (run %load_ext tea_notebook there)' });
    comm.open({ request: 'context', run, step, stage: '' });
  });
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
      el('span', 'tea-ctx-gist', gist(p.text, 100))
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
