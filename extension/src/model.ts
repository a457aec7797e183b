/**
 * The trajectory payload (application/vnd.tea.trajectory+json) and everything the renderer
 * computes from it: validation, the rows each view shows (steps, stages, threads), filters,
 * search, the per-step chart and a small Python highlighter.
 *
 * Pure functions, no DOM and no JupyterLab: unit-tested with node's test runner.
 */

import { IEvalSample, parseEvaluation } from './evalsample';
import {
  DivergedEvent,
  FORK_UNITS,
  ForkUnit,
  MessageEvent,
  RUN_STATUSES,
  RunStatus,
  StageEvent,
  THREAD_STATUSES,
  ThreadEvent,
  ThreadStatus
} from './events';

export const MIME_TYPE = 'application/vnd.tea.trajectory+json';

export interface IAction {
  name: string;
  arguments: unknown;
  ok?: boolean | null;
  observation?: string;
  /** a live run's call that has not returned: seconds it had run when the update was made */
  running_for?: number;
  /** when that call started, on this page's clock (ms since the epoch): the view counts on from it */
  running_since?: number;
}

export interface IStep {
  number: number;
  thinking: string;
  evaluation: string;
  memory: string;
  next_goal: string;
  replayed: boolean;
  errors: string[];
  prompt_tokens: number;
  completion_tokens: number;
  cost: number;
  actions: IAction[];
  /** seconds of the step's model calls, from the output's metadata (the payload holds no durations) */
  latency?: number;
  /** seconds of the step's tool calls (wall clock), from the output's metadata */
  tool_time?: number;
  /** what a fork changed at this step (forks.ts `parseEdit` reads it), or null */
  edited?: Record<string, unknown> | null;
  /** how a fork took this step when not from the model ("actions edited", "re-executed live", ...) */
  note?: string;
}

/** A ToolSelf stage: its `stage` event's configuration (events.ts, generated from the Python definitions). */
export interface IStage
  extends Pick<StageEvent, 'index' | 'first_step' | 'sub_goal' | 'strategy' | 'toolbox' | 'knowledge'> {
  reason: string;
  note: string;
}

/** A CORAL thread as its latest `thread` event left it. */
export interface IThread extends Pick<ThreadEvent, 'id' | 'name' | 'participants' | 'summary'> {
  status: ThreadStatus;
}

/** A CORAL message: its `message` event. */
export interface IMessage extends Pick<MessageEvent, 'seq' | 'thread' | 'sender' | 'mentions' | 'content'> {
  /** tool calls the sender made before this message: [child index, step number, action index] */
  work?: [number, number, number][];
  /** false when the message was sent in the middle of its sender's turn: a fork cannot start there */
  forkable?: boolean;
}

/**
 * A fork's comparison with the run it was forked from (the payload's `divergence`): `source` alone while
 * it reproduces that run; with `step`, `how`, `original` and `replay` from its `diverged` event once it
 * first departed. `unit` is what `step` counts ('step', or a CORAL team's 'message').
 */
export interface IDivergence extends Partial<Pick<DivergedEvent, 'step' | 'how' | 'original' | 'replay'>> {
  source: string;
  unit: string;
}

export interface ITrajectory {
  version: number;
  agent: string;
  task: string;
  model: string;
  /** the run's status ('unknown' when a payload names none this extension knows) */
  status: RunStatus | 'unknown';
  answer: string;
  prompt_tokens: number;
  completion_tokens: number;
  cost: number;
  steps: IStep[];
  stages: IStage[];
  threads: IThread[];
  messages: IMessage[];
  children: ITrajectory[];
  /** true while the run goes (the live view's payload) */
  live?: boolean;
  /** token counts are estimates (a scripted offline model counts characters, not tokens) */
  tokens_estimated?: boolean;
  /** the run's files (names relative to its folder) and its todo.md */
  files?: string[];
  todo?: string;
  forked_from?: string | null;
  /** what `ws.fork` replays of this run: 'steps' (Fork buttons on its steps), 'messages' (CORAL), 'stages' (ToolSelf), '' (none) */
  forkable?: ForkUnit | '';
  /** what this run's fork edited (forks.ts `parseEdit` reads it), or null */
  edit?: Record<string, unknown> | null;
  /** the run continues a stopped one (`ws.resume`) rather than forking it */
  resumed?: boolean;
  /** where it was forked or resumed, in words ("after step 4", "at stage 2", "at helper's step 2") */
  fork_point?: string;
  /** a line the live view says beside the header while it matters (litellm's first import) */
  note?: string;
  /** why an interrupted run stopped ("stopped by the user", "interrupted: the kernel restarted") */
  stop_reason?: string;
  /** what an evaluation made of this run when it was one of its samples (evalsample.ts), else null */
  evaluation?: IEvalSample | null;
  /** a fork's comparison with its original (where it first departed, or that it reproduces it), or null */
  divergence?: IDivergence | null;
  /** a live update that carries only what changed (live.ts merges it into what the view holds) */
  partial?: boolean;
  /** in a partial update: this sub-run's place among its parent's children */
  index?: number;
  /** the view missed a live update: some of the run may be missing until a whole payload comes */
  incomplete?: boolean;
}

/** What the output's metadata says about the run (ids and timings are kept out of the payload). */
export interface IRunMeta {
  run_id?: string | null;
  parent_id?: string | null;
  forked_from?: string | null;
  fork_step?: number | null;
  kernel?: string | null;
  latency?: ILatencyTree;
  folder?: string | null;
  /** live updates are numbered: `seq` this one, `base` the one a partial update applies to */
  live?: boolean;
  seq?: number;
  base?: number | null;
}

export interface ILatencyTree {
  /** model seconds per step */
  steps?: number[];
  /** tool seconds per step */
  tools?: number[];
  children?: ILatencyTree[];
}

export type ParseResult =
  | { ok: true; traj: ITrajectory }
  | { ok: false; error: string; raw: string };

const str = (v: unknown): string =>
  v === null || v === undefined ? '' : typeof v === 'string' ? v : String(v);
const num = (v: unknown): number =>
  typeof v === 'number' && isFinite(v) ? v : 0;
const strs = (v: unknown): string[] => (Array.isArray(v) ? v.map(str) : []);
/** `v` when it is one of `values` (a kind the Python definitions declare, see events.ts), else `fallback`. */
const member = <T extends string>(v: unknown, values: readonly T[], fallback: T): T =>
  values.includes(v as T) ? (v as T) : fallback;

const record = (v: unknown): Record<string, unknown> | null =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

function fail(msg: string): never {
  throw new Error(msg);
}

function obj(v: unknown, where: string): Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    fail(`${where} is not an object`);
  }
  return v as Record<string, unknown>;
}

function list(v: unknown, where: string): unknown[] {
  if (v === undefined || v === null) {
    return [];
  }
  if (!Array.isArray(v)) {
    fail(`${where} is not a list`);
  }
  return v;
}

function parseStep(v: unknown, where: string): IStep {
  const o = obj(v, where);
  if (typeof o.number !== 'number') {
    fail(`${where}.number is not a number`);
  }
  return {
    number: o.number as number,
    thinking: str(o.thinking),
    evaluation: str(o.evaluation),
    memory: str(o.memory),
    next_goal: str(o.next_goal),
    replayed: Boolean(o.replayed),
    errors: strs(o.errors),
    prompt_tokens: num(o.prompt_tokens),
    completion_tokens: num(o.completion_tokens),
    cost: num(o.cost),
    edited: record(o.edited),
    note: str(o.note),
    actions: list(o.actions, `${where}.actions`).map((a, i) => {
      const ao = obj(a, `${where}.actions[${i}]`);
      const action: IAction = {
        name: str(ao.name),
        arguments: ao.arguments,
        ok: ao.ok === undefined ? null : (ao.ok as boolean | null),
        observation: str(ao.observation)
      };
      if (typeof ao.running_for === 'number' && isFinite(ao.running_for) && ao.running_for >= 0) {
        action.running_for = ao.running_for;
        action.running_since = Date.now() - ao.running_for * 1000;
      }
      return action;
    })
  };
}

function parseTraj(v: unknown, where: string, depth: number): ITrajectory {
  if (depth > 50) {
    fail('sub-agents nest too deep');
  }
  const o = obj(v, where);
  if (typeof o.agent !== 'string') {
    fail(`${where}.agent is missing`);
  }
  if (!Array.isArray(o.steps)) {
    fail(`${where}.steps is not a list`);
  }
  return {
    version: num(o.version) || 1,
    agent: o.agent,
    task: str(o.task),
    model: str(o.model),
    status: member<RunStatus | 'unknown'>(o.status, RUN_STATUSES, 'unknown'),
    answer: str(o.answer),
    prompt_tokens: num(o.prompt_tokens),
    completion_tokens: num(o.completion_tokens),
    cost: num(o.cost),
    steps: list(o.steps, `${where}.steps`).map((s, i) =>
      parseStep(s, `${where}.steps[${i}]`)
    ),
    stages: list(o.stages, `${where}.stages`).map((s, i) => {
      const so = obj(s, `${where}.stages[${i}]`);
      return {
        index: num(so.index),
        first_step: num(so.first_step),
        sub_goal: str(so.sub_goal),
        strategy: str(so.strategy),
        toolbox: strs(so.toolbox),
        knowledge: str(so.knowledge),
        reason: str(so.reason),
        note: str(so.note)
      };
    }),
    threads: list(o.threads, `${where}.threads`).map((t, i) => {
      const to = obj(t, `${where}.threads[${i}]`);
      return {
        id: str(to.id),
        name: str(to.name),
        participants: strs(to.participants),
        status: member(to.status, THREAD_STATUSES, 'open'),
        summary: str(to.summary)
      };
    }),
    messages: list(o.messages, `${where}.messages`).map((m, i) => {
      const mo = obj(m, `${where}.messages[${i}]`);
      const work = Array.isArray(mo.work)
        ? (mo.work as unknown[])
            .filter(w => Array.isArray(w) && w.length === 3)
            .map(w => (w as unknown[]).map(num) as [number, number, number])
        : [];
      return {
        seq: num(mo.seq),
        thread: str(mo.thread),
        sender: str(mo.sender),
        mentions: strs(mo.mentions),
        content: str(mo.content),
        work,
        ...(mo.forkable === false ? { forkable: false } : {})
      };
    }),
    children: list(o.children, `${where}.children`).map((c, i) =>
      parseTraj(c, `${where}.children[${i}]`, depth + 1)
    ),
    live: o.live === true,
    tokens_estimated: o.tokens_estimated === true,
    files: strs(o.files),
    todo: str(o.todo),
    forked_from: o.forked_from ? str(o.forked_from) : null,
    forkable: member<ForkUnit | ''>(o.forkable, FORK_UNITS, ''),
    edit: record(o.edit),
    resumed: o.resumed === true,
    fork_point: str(o.fork_point),
    note: str(o.note),
    stop_reason: str(o.stop_reason),
    evaluation: parseEvaluation(o.evaluation),
    divergence: parseDivergence(o.divergence),
    partial: o.partial === true,
    index: typeof o.index === 'number' && o.index >= 0 ? Math.floor(o.index) : undefined
  };
}

/** The payload's `divergence` checked (null when absent or not one: the view then says nothing). */
export function parseDivergence(v: unknown): IDivergence | null {
  const o = record(v);
  if (!o || typeof o.source !== 'string' || !o.source) {
    return null;
  }
  const out: IDivergence = { source: o.source, unit: o.unit === 'message' ? 'message' : 'step' };
  if (typeof o.step === 'number' && isFinite(o.step)) {
    out.step = o.step;
    out.how = str(o.how) as DivergedEvent['how']; // a kind this release does not know is shown as it is
    out.original = str(o.original);
    out.replay = str(o.replay);
  }
  return out;
}

/** Validate a payload; on failure the error says where, and `raw` is the JSON to show (as text). */
export function parsePayload(data: unknown, meta?: IRunMeta): ParseResult {
  let raw: string;
  try {
    raw = JSON.stringify(data, null, 2) ?? String(data);
  } catch {
    raw = String(data);
  }
  try {
    const traj = parseTraj(data, 'payload', 0);
    if (meta?.latency) {
      attachLatency(traj, meta.latency);
    }
    return { ok: true, traj };
  } catch (e) {
    return { ok: false, error: (e as Error).message, raw };
  }
}

function attachLatency(traj: ITrajectory, tree: ILatencyTree): void {
  (tree.steps ?? []).forEach((l, i) => {
    if (traj.steps[i] && typeof l === 'number') {
      traj.steps[i].latency = l;
    }
  });
  (tree.tools ?? []).forEach((l, i) => {
    if (traj.steps[i] && typeof l === 'number') {
      traj.steps[i].tool_time = l;
    }
  });
  (tree.children ?? []).forEach((c, i) => {
    if (traj.children[i] && c) {
      attachLatency(traj.children[i], c);
    }
  });
}

// -- status, agents, tools -----------------------------------------------------------------------

/** 'error' when a step has an error or a failed action, else 'ok'. */
export function stepStatus(step: IStep): 'ok' | 'error' {
  return step.errors.length || step.actions.some(a => a.ok === false)
    ? 'error'
    : 'ok';
}

/** Every agent in the run tree, the root first. */
export function agentsOf(traj: ITrajectory): string[] {
  const out = new Set<string>();
  const walk = (t: ITrajectory): void => {
    out.add(t.agent);
    t.children.forEach(walk);
  };
  walk(traj);
  return [...out];
}

/** Every tool called anywhere in the run tree, sorted. */
export function toolsOf(traj: ITrajectory): string[] {
  const out = new Set<string>();
  const walk = (t: ITrajectory): void => {
    t.steps.forEach(s => s.actions.forEach(a => out.add(a.name)));
    t.children.forEach(walk);
  };
  walk(traj);
  return [...out].sort();
}

/** Arguments as one line of text (JSON), whatever they came as. */
export function argsText(args: unknown): string {
  if (typeof args === 'string') {
    return args;
  }
  try {
    return JSON.stringify(args) ?? '';
  } catch {
    return String(args);
  }
}

/** Generated code in an action's arguments (a tool maker's `code`, a python tool's `code`/`source`). */
export function codeOf(action: IAction): string | null {
  let args = action.arguments;
  if (typeof args === 'string' && args.trim().startsWith('{')) {
    try {
      args = JSON.parse(args);
    } catch {
      return null;
    }
  }
  if (args && typeof args === 'object' && !Array.isArray(args)) {
    const o = args as Record<string, unknown>;
    for (const key of ['code', 'source', 'tool_code', 'python']) {
      if (typeof o[key] === 'string' && (o[key] as string).includes('\n')) {
        return o[key] as string;
      }
    }
  }
  return null;
}

// -- filters, search, rows -----------------------------------------------------------------------

export interface IFilter {
  agent: string; // '' = all
  tool: string; // '' = all
  status: '' | 'ok' | 'error';
  query: string;
}

export const NO_FILTER: IFilter = { agent: '', tool: '', status: '', query: '' };

/** The text of a step that search looks at. */
export function stepText(step: IStep): string {
  const parts = [
    step.thinking,
    step.evaluation,
    step.memory,
    step.next_goal,
    ...step.errors
  ];
  for (const a of step.actions) {
    parts.push(a.name, argsText(a.arguments), a.observation ?? '');
  }
  return parts.join('\n').toLowerCase();
}

export function stepMatches(
  step: IStep,
  agent: string,
  filter: IFilter
): boolean {
  if (filter.agent && filter.agent !== agent) {
    return false;
  }
  if (filter.tool && !step.actions.some(a => a.name === filter.tool)) {
    return false;
  }
  if (filter.status && stepStatus(step) !== filter.status) {
    return false;
  }
  const q = filter.query.trim().toLowerCase();
  return !q || stepText(step).includes(q);
}

/** A row of a view's virtualised list. `key` is stable across re-renders of a live run. */
export type Row =
  | {
      kind: 'run';
      key: string;
      depth: number;
      traj: ITrajectory;
      path: number[];
    }
  | {
      kind: 'step';
      key: string;
      depth: number;
      step: IStep;
      agent: string;
      path: number[];
      stage?: number;
    }
  | { kind: 'stage'; key: string; depth: number; stage: IStage; count: number }
  | {
      kind: 'thread';
      key: string;
      depth: number;
      thread: IThread;
      count: number;
    }
  | {
      kind: 'message';
      key: string;
      depth: number;
      message: IMessage;
      orchestrator: boolean;
    }
  | { kind: 'note'; key: string; depth: number; text: string };

const pathKey = (path: number[]): string => path.join('.') || 'root';

/** The child run at `path` (indices into children, from the root). */
export function runAt(root: ITrajectory, path: number[]): ITrajectory | null {
  let t: ITrajectory | undefined = root;
  for (const i of path) {
    t = t?.children[i];
  }
  return t ?? null;
}

/**
 * The steps view: each run's steps, its sub-agent runs nested below (a tree by `depth`).
 * `collapsed` holds the keys of run rows whose subtree is folded. With a filter, runs that have
 * no matching step (and no matching descendant) are left out.
 */
export function stepRows(
  traj: ITrajectory,
  filter: IFilter = NO_FILTER,
  collapsed: ReadonlySet<string> = new Set()
): Row[] {
  const rows: Row[] = [];
  const walk = (t: ITrajectory, path: number[], depth: number): boolean => {
    const key = `run:${pathKey(path)}`;
    const mine: Row[] = [];
    for (const s of t.steps) {
      if (stepMatches(s, t.agent, filter)) {
        mine.push({
          kind: 'step',
          key: `step:${pathKey(path)}:${s.number}`,
          depth: depth + (path.length ? 1 : 0),
          step: s,
          agent: t.agent,
          path
        });
      }
    }
    const head = rows.length;
    if (path.length) {
      rows.push({ kind: 'run', key, depth, traj: t, path });
    }
    const folded = collapsed.has(key);
    if (!folded) {
      rows.push(...mine);
    }
    let any = mine.length > 0;
    const before = rows.length;
    t.children.forEach((c, i) => {
      const childAny = walk(c, [...path, i], depth + (path.length ? 1 : 0));
      any = any || childAny;
    });
    if (folded) {
      rows.length = before; // a folded run hides its sub-runs too
    }
    const filtered = filter !== NO_FILTER && !isEmpty(filter);
    if (path.length && filtered && !any) {
      rows.length = head; // nothing matched in this subtree
    }
    return any;
  };
  walk(traj, [], 0);
  return rows;
}

export function isEmpty(filter: IFilter): boolean {
  return !filter.agent && !filter.tool && !filter.status && !filter.query.trim();
}

/** The stages view (ToolSelf): each stage a section headed by its sub-goal and toolbox. */
export function stageRows(
  traj: ITrajectory,
  filter: IFilter = NO_FILTER,
  collapsed: ReadonlySet<string> = new Set()
): Row[] {
  const stages = [...traj.stages].sort((a, b) => a.first_step - b.first_step);
  const rows: Row[] = [];
  const stepRow = (s: IStep, stage?: number): Row => ({
    kind: 'step',
    key: `step:root:${s.number}`,
    depth: stage === undefined ? 0 : 1,
    step: s,
    agent: traj.agent,
    path: [],
    stage
  });
  const before = stages.length ? stages[0].first_step : Infinity;
  for (const s of traj.steps) {
    if (s.number < before && stepMatches(s, traj.agent, filter)) {
      rows.push(stepRow(s));
    }
  }
  stages.forEach((st, i) => {
    const end = i + 1 < stages.length ? stages[i + 1].first_step : Infinity;
    const inside = traj.steps.filter(
      s =>
        s.number >= st.first_step &&
        s.number < end &&
        stepMatches(s, traj.agent, filter)
    );
    const key = `stage:${st.index}`;
    rows.push({ kind: 'stage', key, depth: 0, stage: st, count: inside.length });
    if (!collapsed.has(key)) {
      rows.push(...inside.map(s => stepRow(s, st.index)));
    }
  });
  return rows;
}

/** The threads view (CORAL): per thread a chat-like transcript of its messages. */
export function threadRows(
  traj: ITrajectory,
  filter: IFilter = NO_FILTER,
  collapsed: ReadonlySet<string> = new Set()
): Row[] {
  const known = new Set(traj.threads.map(t => t.id));
  const threads: IThread[] = [...traj.threads];
  for (const m of traj.messages) {
    if (!known.has(m.thread)) {
      known.add(m.thread);
      threads.push({
        id: m.thread,
        name: m.thread,
        participants: [],
        status: 'open',
        summary: ''
      });
    }
  }
  const orchestrator = traj.agent;
  const q = filter.query.trim().toLowerCase();
  const rows: Row[] = [];
  for (const t of threads) {
    const mine = traj.messages
      .filter(m => m.thread === t.id)
      .filter(m => !filter.agent || m.sender === filter.agent)
      .filter(
        m =>
          !q ||
          m.content.toLowerCase().includes(q) ||
          m.sender.toLowerCase().includes(q)
      )
      .sort((a, b) => a.seq - b.seq);
    if (!isEmpty(filter) && !mine.length) {
      continue;
    }
    const key = `thread:${t.id}`;
    rows.push({ kind: 'thread', key, depth: 0, thread: t, count: mine.length });
    if (!collapsed.has(key)) {
      for (const m of mine) {
        rows.push({
          kind: 'message',
          key: `msg:${m.seq}`,
          depth: 1,
          message: m,
          orchestrator: m.sender === orchestrator
        });
      }
    }
  }
  return rows;
}

/** The actions a message's `work` refers to, resolved against the run's children. */
export function workOf(
  traj: ITrajectory,
  message: IMessage
): { agent: string; step: number; action: IAction }[] {
  const out: { agent: string; step: number; action: IAction }[] = [];
  for (const [c, s, a] of message.work ?? []) {
    const child = traj.children[c];
    const step = child?.steps.find(x => x.number === s);
    const action = step?.actions[a];
    if (child && step && action) {
      out.push({ agent: child.agent, step: s, action });
    }
  }
  return out;
}

/** Which views a trajectory has: steps always; stages (ToolSelf), threads (CORAL) when present. */
export function viewsOf(traj: ITrajectory): ('steps' | 'stages' | 'threads')[] {
  const out: ('steps' | 'stages' | 'threads')[] = [];
  if (traj.messages.length || traj.threads.length) {
    out.push('threads');
  }
  if (traj.stages.length) {
    out.push('stages');
  }
  out.push('steps');
  return out;
}

// -- virtual list maths --------------------------------------------------------------------------

/** Offsets (prefix sums) of rows with the given heights; offsets[n] is the total height. */
export function offsets(heights: number[]): number[] {
  const out = new Array<number>(heights.length + 1);
  out[0] = 0;
  for (let i = 0; i < heights.length; i++) {
    out[i + 1] = out[i] + heights[i];
  }
  return out;
}

/** The first row index whose bottom is below `y` (binary search over offsets). */
export function rowAt(offs: number[], y: number): number {
  let lo = 0;
  let hi = offs.length - 2;
  if (hi < 0) {
    return 0;
  }
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (offs[mid + 1] <= y) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/** The rows [start, end) to render for a viewport, with `overscan` extra rows each side. */
export function visibleRange(
  offs: number[],
  top: number,
  height: number,
  overscan = 4
): [number, number] {
  const n = offs.length - 1;
  if (n <= 0) {
    return [0, 0];
  }
  const first = rowAt(offs, top);
  const last = rowAt(offs, top + height);
  return [Math.max(0, first - overscan), Math.min(n, last + 1 + overscan)];
}

// -- the per-step chart ---------------------------------------------------------------------------

export interface IChartBar {
  x: number;
  y: number;
  w: number;
  h: number;
  step: number;
}

/** Bars of one series (tokens, cost or latency per step) scaled to a width x height box. */
export function chartBars(
  values: number[],
  width: number,
  height: number
): IChartBar[] {
  if (!values.length) {
    return [];
  }
  const max = Math.max(...values, 0);
  const w = width / values.length;
  return values.map((v, i) => {
    const h = max > 0 ? Math.max(v > 0 ? 1 : 0, (v / max) * height) : 0;
    return { x: i * w, y: height - h, w: Math.max(w - (w > 3 ? 1 : 0), 0.5), h, step: i };
  });
}

export function stepTokens(s: IStep): number {
  return s.prompt_tokens + s.completion_tokens;
}

// -- Python highlighting (tokens become text nodes with a class: never HTML) ------------------------

export interface IToken {
  text: string;
  cls: '' | 'kw' | 'str' | 'com' | 'num' | 'def';
}

const KEYWORDS = new Set(
  (
    'False None True and as assert async await break class continue def del elif else except ' +
    'finally for from global if import in is lambda nonlocal not or pass raise return try while with yield'
  ).split(' ')
);

const TOKEN = /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|(\b\d[\d_]*(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;

export function highlightPython(code: string): IToken[] {
  const out: IToken[] = [];
  let last = 0;
  let prev = '';
  for (const m of code.matchAll(TOKEN)) {
    const at = m.index ?? 0;
    if (at > last) {
      out.push({ text: code.slice(last, at), cls: '' });
    }
    let cls: IToken['cls'] = '';
    if (m[1]) {
      cls = 'com';
    } else if (m[2]) {
      cls = 'str';
    } else if (m[3]) {
      cls = 'num';
    } else if (m[4]) {
      cls = KEYWORDS.has(m[4]) ? 'kw' : prev === 'def' || prev === 'class' ? 'def' : '';
      prev = m[4];
    }
    out.push({ text: m[0], cls });
    last = at + m[0].length;
  }
  if (last < code.length) {
    out.push({ text: code.slice(last), cls: '' });
  }
  return out;
}

// -- small formatting helpers ---------------------------------------------------------------------

export function fmtCost(c: number): string {
  return `$${c.toFixed(4)}`;
}

export function fmtTokens(n: number): string {
  return n >= 10000 ? `${(n / 1000).toFixed(1)}k` : String(n);
}

/** The first line of a text, shortened to `n` characters. */
export function gist(text: string, n = 120): string {
  const line = text.split('\n').find(l => l.trim()) ?? '';
  return line.length > n ? line.slice(0, n - 1) + '…' : line;
}

/** Whether a step at `path` (empty: the root run's own) gets a Fork button: only on a finished run that
 * says its steps can be forked (not ToolSelf, a workflow agent, a CORAL team or a sub-run). */
export function stepForkable(traj: ITrajectory, path: readonly number[]): boolean {
  return path.length === 0 && !traj.live && traj.forkable === 'steps';
}

/** How many steps a run took, as its header says (the kernel's `steps_label`): its own, and with its
 * sub-agents' when they add any; a run with none of its own (a CORAL team) counts its members'. */
export function stepsLabel(own: number, total: number): string {
  if (total <= own) {
    return `${own} steps`;
  }
  return own === 0 ? `${total} steps (by sub-agents)` : `${own} steps (${total} with sub-agents)`;
}

/** A step's time as the card shows it: the model's and the tools' seconds, apart. */
export function stepTimes(s: IStep): string[] {
  const out: string[] = [];
  if (s.latency) {
    out.push(`model ${s.latency.toFixed(2)} s`);
  }
  if (s.tool_time) {
    out.push(`tools ${s.tool_time.toFixed(2)} s`);
  }
  return out;
}

/** The `%tea fork` line for a step of a run. */
export function forkCommand(runId: string, step: number): string {
  if (!/^[0-9A-Za-z_-]+$/.test(runId)) {
    throw new Error(`not a run id: ${runId}`);
  }
  return `%tea fork ${runId} --step ${Math.floor(step)}`;
}

/** A tool call of a live run that has not returned, as the in-progress card shows it. */
export interface IRunningCall {
  /** the sub-agent that made it ('' for the run itself) */
  agent: string;
  step: number;
  name: string;
  /** seconds it has run, at `now` */
  seconds: number;
}

/** The calls of a live run (and its sub-runs) still running at `now` (ms since the epoch), longest first. */
export function runningCalls(traj: ITrajectory, now: number): IRunningCall[] {
  const out: IRunningCall[] = [];
  const collect = (t: ITrajectory, agent: string): void => {
    for (const s of t.steps) {
      for (const a of s.actions) {
        if (a.running_since !== undefined && (a.ok === null || a.ok === undefined)) {
          out.push({ agent, step: s.number, name: a.name, seconds: Math.max(0, (now - a.running_since) / 1000) });
        }
      }
    }
    for (const c of t.children) {
      if (c.status === 'running' || c.status === 'unknown') {
        collect(c, c.agent); // a sub-run that ended runs nothing
      }
    }
  };
  if (traj.live) {
    collect(traj, '');
  }
  return out.sort((a, b) => b.seconds - a.seconds);
}

/** One running call in words: "step 1: very_slow running 3 s…" ("helper's step 2: …" for a sub-agent's). */
export function runningText(call: IRunningCall): string {
  const who = call.agent ? `${call.agent}'s ` : '';
  return `${who}step ${call.step}: ${call.name} running ${Math.floor(call.seconds)} s…`;
}

/** The magic that goes on with an interrupted run. */
export function resumeCommand(runId: string): string {
  return `%tea resume ${runId}`;
}
