/**
 * The trajectory's views, one component each: steps (the run tree), stages (ToolSelf) and threads
 * (CORAL). A component says which rows it shows for a trajectory and a filter, and draws one row;
 * the renderer (view.ts) owns the header, the toolbar and the virtualised list around it.
 */

import {
  IFilter,
  IRunMeta,
  ITrajectory,
  Row,
  argsText,
  codeOf,
  fmtCost,
  fmtTokens,
  gist,
  stageRows,
  stepRows,
  stepStatus,
  stepTimes,
  stepTokens,
  threadRows,
  workOf
} from './model';
import { el, highlighted } from './dom';
import {
  contextPanel,
  editChips,
  editPanel,
  editedDetail,
  messageButtons,
  stageButtons,
  stepButtons
} from './timetravel';
import type { IViewHost } from './view';

export type ViewName = 'steps' | 'stages' | 'threads';

/** Observations longer than this show a preview and a "show all" button. */
const OBS_PREVIEW = 2000;

/** What a component gets from the renderer to draw a row and to react to clicks in it. */
export interface IRowContext {
  traj: ITrajectory;
  host: IViewHost;
  meta: IRunMeta;
  /** keys of open step cards and messages */
  expanded: Set<string>;
  /** keys of folded sub-runs, stages and threads */
  collapsed: Set<string>;
  /** the key of the card just jumped to */
  flash: string;
  toggle: (key: string, set: Set<string>) => void;
  /** a row changed height (e.g. "show all"): measure and lay out again */
  remeasure: (key: string) => void;
}

export interface IViewComponent {
  readonly name: ViewName;
  /** what the toolbar's count counts */
  readonly unit: string;
  /** the filters that apply to this view (the others are disabled) */
  readonly filters: (keyof IFilter)[];
  rows(traj: ITrajectory, filter: IFilter, collapsed: ReadonlySet<string>): Row[];
  render(row: Row, ctx: IRowContext): HTMLElement;
}

/** The run tree: the root's steps, each sub-agent run a folding header with its steps below. */
export class StepsView implements IViewComponent {
  readonly name = 'steps';
  readonly unit = 'steps';
  readonly filters: (keyof IFilter)[] = ['agent', 'tool', 'status', 'query'];
  rows(traj: ITrajectory, filter: IFilter, collapsed: ReadonlySet<string>): Row[] {
    return stepRows(traj, filter, collapsed);
  }
  render(row: Row, ctx: IRowContext): HTMLElement {
    return row.kind === 'run' ? runHeader(row, ctx) : row.kind === 'step' ? stepCard(row, ctx) : note(row);
  }
}

/** ToolSelf: each stage a section headed by its sub-goal, toolbox and why it began. */
export class StagesView implements IViewComponent {
  readonly name = 'stages';
  readonly unit = 'steps';
  readonly filters: (keyof IFilter)[] = ['tool', 'status', 'query'];
  rows(traj: ITrajectory, filter: IFilter, collapsed: ReadonlySet<string>): Row[] {
    return stageRows(traj, filter, collapsed);
  }
  render(row: Row, ctx: IRowContext): HTMLElement {
    return row.kind === 'stage' ? stageHeader(row, ctx) : row.kind === 'step' ? stepCard(row, ctx) : note(row);
  }
}

/** CORAL: a chat-like transcript per thread, each member's tool calls folded under its message. */
export class ThreadsView implements IViewComponent {
  readonly name = 'threads';
  readonly unit = 'messages';
  readonly filters: (keyof IFilter)[] = ['agent', 'query'];
  rows(traj: ITrajectory, filter: IFilter, collapsed: ReadonlySet<string>): Row[] {
    return threadRows(traj, filter, collapsed);
  }
  render(row: Row, ctx: IRowContext): HTMLElement {
    return row.kind === 'thread'
      ? threadHeader(row, ctx)
      : row.kind === 'message'
        ? messageCard(row, ctx)
        : note(row);
  }
}

export const VIEWS: Record<ViewName, IViewComponent> = {
  steps: new StepsView(),
  stages: new StagesView(),
  threads: new ThreadsView()
};

function note(row: Row): HTMLElement {
  return el('div', 'tea-muted', row.kind === 'note' ? row.text : '');
}

function stepCard(row: Extract<Row, { kind: 'step' }>, ctx: IRowContext): HTMLElement {
  const s = row.step;
  const open = ctx.expanded.has(row.key);
  const card = el('div', `tea-step tea-${stepStatus(s)}${open ? ' tea-open' : ''}`);
  card.setAttribute('data-step', String(s.number));
  card.setAttribute('data-agent', row.agent);
  if (ctx.flash === row.key) {
    card.classList.add('tea-flash');
  }
  const head = el('div', 'tea-step-head');
  head.append(el('span', 'tea-caret', open ? '▾' : '▸'), el('b', '', `step ${s.number}`));
  if (row.path.length) {
    head.append(el('span', 'tea-chip tea-chip-agent', row.agent));
  }
  if (s.replayed) {
    head.append(el('span', 'tea-chip', 'replayed'));
  }
  head.append(...editChips(s));
  head.append(el('span', 'tea-gist', gist(s.next_goal || s.thinking || s.evaluation, 90)));
  for (const a of s.actions.slice(0, 4)) {
    head.append(el('span', `tea-chip tea-tool${a.ok === false ? ' tea-bad' : ''}`, a.name));
  }
  if (s.actions.length > 4) {
    head.append(el('span', 'tea-muted', `+${s.actions.length - 4}`));
  }
  const metrics = [`${fmtTokens(stepTokens(s))} tok`, fmtCost(s.cost), ...stepTimes(s)];
  head.append(el('span', 'tea-metrics tea-muted', metrics.join(' · ')));
  head.append(...stepButtons(row, ctx)); // Fork, edit and fork, context (timetravel.ts)
  head.addEventListener('click', () => ctx.toggle(row.key, ctx.expanded));
  card.append(head);
  if (open) {
    card.append(stepBody(row, ctx));
  }
  const edit = editPanel(row.key, ctx); // "edit and fork" (timetravel.ts)
  if (edit) {
    card.append(edit);
  }
  const context = contextPanel(row, ctx);
  if (context) {
    card.append(context);
  }
  return card;
}

function stepBody(row: Extract<Row, { kind: 'step' }>, ctx: IRowContext): HTMLElement {
  const s = row.step;
  const body = el('div', 'tea-step-body');
  const edited = editedDetail(s);
  if (edited) {
    body.append(edited);
  }
  for (const [label, value] of [
    ['thinking', s.thinking],
    ['evaluation', s.evaluation],
    ['memory', s.memory],
    ['next goal', s.next_goal]
  ]) {
    if (value) {
      const f = el('div', `tea-field tea-field-${label.replace(' ', '-')}`);
      f.append(el('span', 'tea-muted', `${label}: `), document.createTextNode(value));
      body.append(f);
    }
  }
  for (const a of s.actions) {
    const act = el('div', 'tea-action');
    const code = codeOf(a);
    const call = el('code', `tea-call${a.ok === false ? ' tea-bad' : ''}`);
    call.textContent = code ? `${a.name}(…)` : `${a.name}(${argsText(a.arguments)})`;
    act.append(call);
    if (code) {
      act.append(highlighted(code));
    }
    const obs = a.observation ?? '';
    if (obs) {
      const pre = el('pre', 'tea-obs', obs.length > OBS_PREVIEW ? obs.slice(0, OBS_PREVIEW) + '…' : obs);
      act.append(pre);
      if (obs.length > OBS_PREVIEW) {
        const more = el('button', 'tea-more', `show all (${obs.length.toLocaleString()} characters)`);
        more.addEventListener('click', ev => {
          ev.stopPropagation();
          pre.textContent = obs;
          more.remove();
          ctx.remeasure(row.key);
        });
        act.append(more);
      }
    }
    body.append(act);
  }
  for (const err of s.errors) {
    body.append(el('div', 'tea-err', err));
  }
  return body;
}

function runHeader(row: Extract<Row, { kind: 'run' }>, ctx: IRowContext): HTMLElement {
  const t = row.traj;
  const folded = ctx.collapsed.has(row.key);
  const head = el('div', 'tea-run');
  head.setAttribute('data-agent', t.agent);
  head.append(
    el('span', 'tea-caret', folded ? '▸' : '▾'),
    el('span', 'tea-muted', 'sub-agent '),
    el('b', '', t.agent),
    el('span', `tea-status tea-status-${t.status.replace(/[^a-z_]/g, '')}`, t.status),
    el('span', 'tea-muted', `${t.steps.length} steps · ${fmtTokens(t.prompt_tokens + t.completion_tokens)} tok · ${fmtCost(t.cost)}`)
  );
  head.title = t.task;
  head.addEventListener('click', () => ctx.toggle(row.key, ctx.collapsed));
  return head;
}

function stageHeader(row: Extract<Row, { kind: 'stage' }>, ctx: IRowContext): HTMLElement {
  const st = row.stage;
  const folded = ctx.collapsed.has(row.key);
  const box = el('div', 'tea-stage');
  const head = el('div', 'tea-stage-head');
  head.append(
    el('span', 'tea-caret', folded ? '▸' : '▾'),
    el('b', '', `stage ${st.index}`),
    el('span', 'tea-gist', st.sub_goal),
    el('span', 'tea-muted', `${row.count} steps`),
    ...stageButtons(st, row.key, ctx)
  );
  head.addEventListener('click', () => ctx.toggle(row.key, ctx.collapsed));
  const tools = el('div', 'tea-toolbox');
  tools.append(el('span', 'tea-muted', 'toolbox: '));
  for (const t of st.toolbox) {
    tools.append(el('span', 'tea-chip tea-tool', t));
  }
  box.append(head);
  const edit = editPanel(row.key, ctx);
  if (edit) {
    box.append(edit);
  }
  box.append(tools);
  for (const [label, value] of [
    ['why', st.reason],
    ['strategy', st.strategy],
    ['knowledge', st.knowledge === 'ALL' ? 'ALL (the whole history pool)' : st.knowledge]
  ]) {
    if (value) {
      const f = el('div', 'tea-field');
      f.append(el('span', 'tea-muted', `${label}: `), document.createTextNode(value));
      box.append(f);
    }
  }
  if (st.note) {
    box.append(el('div', 'tea-err', st.note));
  }
  return box;
}

function threadHeader(row: Extract<Row, { kind: 'thread' }>, ctx: IRowContext): HTMLElement {
  const t = row.thread;
  const folded = ctx.collapsed.has(row.key);
  const head = el('div', 'tea-thread');
  head.setAttribute('data-thread', t.id);
  head.append(
    el('span', 'tea-caret', folded ? '▸' : '▾'),
    el('span', 'tea-muted', 'thread '),
    el('b', '', t.name || t.id),
    el('span', 'tea-muted', `${row.count} messages · ${t.participants.join(', ')}`)
  );
  if (t.status !== 'open') {
    head.append(el('i', '', t.status));
  }
  if (t.summary) {
    head.append(el('div', 'tea-muted tea-summary', `summary: ${t.summary}`));
  }
  head.addEventListener('click', () => ctx.toggle(row.key, ctx.collapsed));
  return head;
}

function messageCard(row: Extract<Row, { kind: 'message' }>, ctx: IRowContext): HTMLElement {
  const m = row.message;
  const card = el('div', `tea-msg${row.orchestrator ? ' tea-msg-orch' : ''}`);
  card.setAttribute('data-sender', m.sender);
  const head = el('div', 'tea-msg-head');
  head.append(
    el('b', '', m.sender),
    el('span', 'tea-muted', ` → ${m.mentions.map(x => `@${x}`).join(', ')}`),
    ...messageButtons(m, row.key, ctx)
  );
  card.append(head);
  const edit = editPanel(row.key, ctx);
  if (edit) {
    card.append(edit);
  }
  card.append(el('div', 'tea-msg-text', m.content));
  const work = workOf(ctx.traj, m);
  if (work.length) {
    const open = ctx.expanded.has(row.key);
    const toggle = el('div', 'tea-work-toggle tea-muted', `${open ? '▾' : '▸'} ${work.length} tool calls`);
    toggle.addEventListener('click', () => ctx.toggle(row.key, ctx.expanded));
    card.append(toggle);
    if (open) {
      for (const w of work) {
        const act = el('div', 'tea-action');
        act.append(
          el('code', `tea-call${w.action.ok === false ? ' tea-bad' : ''}`, `${w.action.name}(${argsText(w.action.arguments)})`),
          el('pre', 'tea-obs', (w.action.observation ?? '').slice(0, OBS_PREVIEW))
        );
        card.append(act);
      }
    }
  }
  return card;
}
