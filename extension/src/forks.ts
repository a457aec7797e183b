/**
 * Time travel in the renderer, the pure part: where a Fork button goes and what `%tea fork` line it
 * puts in a cell (steps of finished agent-loop runs, sub-agent runs included; ToolSelf stages; CORAL
 * messages), how a fork's edit reads, and the shape of a step's context as the kernel sends it.
 *
 * No DOM and no JupyterLab: unit-tested with node's test runner (timetravel.ts draws the buttons).
 */

import { DivergedEvent } from './events';
import { IAction, IDivergence, IMessage, IRunMeta, ITrajectory, argsText, runAt } from './model';

/** A run's id and its sub-runs' ids, nested like the payload's `children` (the bundle's metadata `runs`). */
export interface IRunIds {
  id: string;
  children?: IRunIds[];
}

/** What a fork changed (the payload's run-level `edit`, or a step's `edited`). */
export interface IEdit {
  kind: string;
  step?: number;
  action?: number;
  tool?: string;
  before?: unknown;
  after?: unknown;
  agent?: string;
  sub_step?: number;
  stage?: number;
  message?: string;
}

/** One part of a step's context (`StepContext.to_dict()`). */
export interface IContextPart {
  message: number;
  role: string;
  kind: string;
  chars: number;
  changed: boolean;
  text: string;
  /** the kernel cut the text (its size is still `chars`) */
  clipped?: boolean;
  /** its first line worth reading, without markup ("step 2: [work] {"n": 2} -> result 2") */
  summary?: string;
}

/** What the model saw at a step, as the kernel's `context` reply carries it. */
export interface IStepContext {
  run_id: string;
  step: number | null;
  stage: string;
  chars: number;
  sizes: Record<string, number>;
  previous_step: number | null;
  clipped: boolean;
  parts: IContextPart[];
  removed: { kind: string; chars: number; text: string }[];
  tools: string[];
}

const RUN_ID = /^[0-9A-Za-z_-]+$/;

/** Whether a text is a run id that may go in a `%tea` line as it is. */
export function isRunId(id: unknown): id is string {
  return typeof id === 'string' && RUN_ID.test(id);
}

/** The id of the run at `path` (indices into `children`; [] the root) from the output's metadata. */
export function runIdAt(meta: IRunMeta, path: readonly number[]): string | null {
  const tree = (meta as { runs?: unknown }).runs as IRunIds | undefined;
  if (!path.length) {
    const id = meta.run_id ?? tree?.id;
    return isRunId(id) ? id : null;
  }
  let node: IRunIds | undefined = tree;
  for (const i of path) {
    node = Array.isArray(node?.children) ? node!.children![i] : undefined;
  }
  return isRunId(node?.id) ? node!.id : null;
}

/** The run whose step at `path` a Fork button forks (its own id: `ws.fork` takes a sub-agent's run and
 * forks its parent from the step that called it), or null when a fork cannot start there: the run is
 * still going, or is no agent loop (ToolSelf forks by stage, CORAL by message, workflow agents not). */
export function stepForkRun(traj: ITrajectory, meta: IRunMeta, path: readonly number[]): string | null {
  const run = runAt(traj, [...path]);
  if (traj.live || !run || run.forkable !== 'steps' || run.status === 'running') {
    return null;
  }
  return runIdAt(meta, path);
}

/** The run a ToolSelf stage's Fork button forks (`%tea fork RUN --stage K`), or null. */
export function stageForkRun(traj: ITrajectory, meta: IRunMeta): string | null {
  return !traj.live && traj.forkable === 'stages' ? runIdAt(meta, []) : null;
}

/** The run a CORAL message's Fork button forks (`%tea fork RUN --step N`, N the message's number), or null;
 * null too for a message sent in the middle of its sender's turn (the kernel refuses a fork there). */
export function messageForkRun(traj: ITrajectory, meta: IRunMeta, message?: IMessage): string | null {
  if (message?.forkable === false) {
    return null;
  }
  return !traj.live && traj.forkable === 'messages' ? runIdAt(meta, []) : null;
}

/** A CORAL message's number as `ws.fork` counts them (its place in the run's messages, from 1). */
export function messageNumber(traj: ITrajectory, seq: number): number {
  const i = traj.messages.findIndex(m => m.seq === seq);
  return i < 0 ? 0 : i + 1;
}

/** Where a fork starts: a step (or a CORAL message number) or a ToolSelf stage. */
export type ForkAt = { step: number } | { stage: number };

/** How a fork answers the tool calls it makes again: the choice the Fork buttons offer (`ws.fork(replay=...)`). */
export type ReplayChoice = 'live' | 'recorded';

/** The replay choices with their one-line explanations, today's default first. */
export const REPLAY_CHOICES: readonly { value: ReplayChoice; label: string; explain: string }[] = [
  {
    value: 'live',
    label: 'live tools',
    explain: "the tools run again, against today's world (the default): their side effects happen again"
  },
  {
    value: 'recorded',
    label: 'recorded tools',
    explain: "each tool call is answered from this run's stored result: no tool runs again (nor one it never made)"
  }
];

/** The `%tea fork` line of a Fork button (`replay`: 'recorded' adds `--replay recorded`; live is the
 * default and adds nothing); with `edit`, the one that prefills a cell to edit instead. */
export function forkLine(run: string, at: ForkAt, edit = false, replay: ReplayChoice = 'live'): string {
  if (!isRunId(run)) {
    throw new Error(`not a run id: ${run}`);
  }
  const where = 'stage' in at ? `--stage ${Math.floor(at.stage)}` : `--step ${Math.floor(at.step)}`;
  const policy = replay === 'recorded' && !edit ? ' --replay recorded' : '';
  return `%tea fork ${run} ${where}${edit ? ' --edit' : ''}${policy}`;
}

/** Each way a fork departs, in words (the kernel's `divergence.WORDS`). */
const DEPARTURE_WORDS: Record<DivergedEvent['how'], string> = {
  'model input': 'different model input',
  action: 'different action',
  arguments: 'different arguments',
  observation: 'different observation',
  ended: 'ended differently',
  message: 'different message'
};

/** How a fork compares with its original, in a line: "departs from RUN at step 4: different model
 * input", or while it has not departed "reproduces RUN so far" (`live`) / "reproduced RUN". */
export function departureText(d: IDivergence, live: boolean): string {
  if (d.step === undefined) {
    return live ? `reproduces ${d.source} so far` : `reproduced ${d.source}`;
  }
  const how = d.how ? DEPARTURE_WORDS[d.how] ?? d.how : 'departed';
  return `departs from ${d.source} at ${d.unit} ${d.step}: ${how}`;
}

/** The `%tea context` line of a step (what the context button shows, as a cell would). */
export function contextLine(run: string, step: number): string {
  if (!isRunId(run)) {
    throw new Error(`not a run id: ${run}`);
  }
  return `%tea context ${run} --step ${Math.floor(step)}`;
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && isFinite(v) ? v : undefined);
const text = (v: unknown): string => (v === null || v === undefined ? '' : String(v));

/** A payload's edit (run-level `edit` or a step's `edited`) checked, or null. */
export function parseEdit(v: unknown): IEdit | null {
  if (!v || typeof v !== 'object' || Array.isArray(v)) {
    return null;
  }
  const o = v as Record<string, unknown>;
  if (typeof o.kind !== 'string' || !o.kind) {
    return null;
  }
  return {
    kind: o.kind,
    step: num(o.step),
    action: num(o.action),
    tool: o.tool === undefined ? undefined : text(o.tool),
    before: o.before,
    after: o.after,
    agent: o.agent === undefined ? undefined : text(o.agent),
    sub_step: num(o.sub_step),
    stage: num(o.stage),
    message: o.message === undefined ? undefined : text(o.message)
  };
}

/** Where a run came from, in words (the header's link): "resumed from RUN after step 4", "forked from RUN
 * at stage 2", "forked from RUN at helper's step 2"; `forkStep` (the output's metadata) when the payload
 * does not say where (a payload from an older release). */
export function lineageText(
  parent: string,
  traj: Pick<ITrajectory, 'resumed' | 'fork_point'>,
  forkStep?: number | null
): string {
  const verb = traj.resumed ? 'resumed' : 'forked';
  let at = traj.fork_point ? ` ${traj.fork_point}` : '';
  if (!at && forkStep) {
    at = traj.resumed ? ` after step ${forkStep}` : ` at step ${forkStep}`;
  }
  return `${verb} from ${parent}${at}`;
}

/** What a fork's edit changed, in a few words (the header's line; a step's "edited" chip title). */
export function editSummary(edit: IEdit): string {
  const where = edit.agent && edit.kind !== 'sub_agent' ? ` in ${edit.agent}'s run` : '';
  return editWords(edit) + where;
}

function editWords(edit: IEdit): string {
  const at = edit.step !== undefined ? ` of step ${edit.step}` : '';
  switch (edit.kind) {
    case 'observation':
      return `edited: the observation of action ${edit.action ?? 1}${edit.tool ? ` (${edit.tool})` : ''}${at}`;
    case 'actions':
      return `edited: the actions${at} (run live)`;
    case 'context':
      return `edited: the context the model got at step ${edit.step ?? '?'}`;
    case 'message':
      return `edited: message ${edit.step ?? '?'}`;
    case 'stage':
      return `edited: the configuration of stage ${edit.stage ?? '?'}`;
    case 'sub_agent':
      return `${edit.agent ?? 'a sub-agent'} forked at its step ${edit.sub_step ?? '?'}`;
    default:
      return `edited: ${edit.kind}`;
  }
}

/** A value an edit replaced or put in, as text (texts as they are, the rest as JSON). */
export function editValue(value: unknown): string {
  if (value === undefined || value === null) {
    return '';
  }
  if (typeof value === 'string') {
    return value;
  }
  if (Array.isArray(value) && value.every(a => a && typeof a === 'object' && 'name' in a)) {
    return (value as IAction[]).map(a => `${a.name}(${argsText(a.arguments)})`).join('\n');
  }
  return argsText(value);
}

/** A context reply checked: the context, or an error message. */
export function parseContextReply(reply: unknown): { ok: true; context: IStepContext } | { ok: false; error: string } {
  const o = (reply ?? {}) as Record<string, unknown>;
  if (o.type === 'error') {
    return { ok: false, error: text(o.message) || 'the kernel could not show this context' };
  }
  const c = o.context as Record<string, unknown> | undefined;
  if (o.type !== 'context' || !c || !Array.isArray(c.parts)) {
    return { ok: false, error: 'the kernel sent no context' };
  }
  const parts = (c.parts as unknown[]).map(p => {
    const q = (p ?? {}) as Record<string, unknown>;
    return {
      message: num(q.message) ?? 0,
      role: text(q.role),
      kind: text(q.kind) || 'message',
      chars: num(q.chars) ?? text(q.text).length,
      changed: q.changed === true,
      text: text(q.text),
      clipped: q.clipped === true,
      summary: typeof q.summary === 'string' ? q.summary : undefined
    };
  });
  const sizes: Record<string, number> = {};
  for (const [k, v] of Object.entries((c.sizes ?? {}) as Record<string, unknown>)) {
    sizes[k] = num(v) ?? 0;
  }
  return {
    ok: true,
    context: {
      run_id: text(c.run_id),
      step: num(c.step) ?? null,
      stage: text(c.stage),
      chars: num(c.chars) ?? parts.reduce((n, p) => n + p.chars, 0),
      sizes,
      previous_step: num(c.previous_step) ?? null,
      clipped: c.clipped === true,
      parts,
      removed: Array.isArray(c.removed)
        ? (c.removed as Record<string, unknown>[]).map(r => ({
            kind: text(r?.kind),
            chars: num(r?.chars) ?? 0,
            text: text(r?.text)
          }))
        : [],
      tools: Array.isArray(c.tools) ? (c.tools as unknown[]).map(text) : []
    }
  };
}

/** A context's sizes by kind, largest first, each with its share of the whole (0..1). */
export function contextShares(ctx: IStepContext): { kind: string; chars: number; share: number }[] {
  const total = Math.max(1, ctx.chars);
  return Object.entries(ctx.sizes)
    .map(([kind, chars]) => ({ kind, chars, share: chars / total }))
    .sort((a, b) => b.chars - a.chars);
}

/** One value "edit and fork" offers to edit (the kernel's `edit_targets` reply): an action's
 * observation, the step's actions, a CORAL message or one field of a ToolSelf stage. */
export interface IEditTarget {
  kind: string;
  label: string;
  value: unknown;
  /** 'text': edited as it is; 'json': edited as JSON (the actions, a stage's toolbox) */
  format: 'text' | 'json';
  action?: number;
  field?: string;
}

/** An `edit_targets` reply checked: the targets, or an error message. */
export function parseEditTargets(reply: unknown): { ok: true; targets: IEditTarget[] } | { ok: false; error: string } {
  const o = (reply ?? {}) as Record<string, unknown>;
  if (o.type === 'error') {
    return { ok: false, error: text(o.message) || 'the kernel offers nothing to edit here' };
  }
  if (o.type !== 'edit_targets' || !Array.isArray(o.targets) || !o.targets.length) {
    return { ok: false, error: 'the kernel sent nothing to edit' };
  }
  const targets = (o.targets as unknown[]).map(t => {
    const q = (t ?? {}) as Record<string, unknown>;
    const target: IEditTarget = {
      kind: text(q.kind),
      label: text(q.label) || text(q.kind),
      value: q.value,
      format: q.format === 'json' ? 'json' : 'text'
    };
    if (num(q.action) !== undefined) {
      target.action = num(q.action);
    }
    if (typeof q.field === 'string' && q.field) {
      target.field = q.field;
    }
    return target;
  });
  return { ok: true, targets };
}

/** The text a target's value is edited as (JSON for 'json' targets, indented). */
export function targetText(target: IEditTarget): string {
  return target.format === 'json' ? JSON.stringify(target.value ?? null, null, 2) : text(target.value);
}

/** What a person typed for a target, as the value the fork gets: the text itself, or its JSON read
 * back (an error saying where the JSON is wrong). */
export function editedValue(
  target: IEditTarget,
  typed: string
): { ok: true; value: unknown } | { ok: false; error: string } {
  if (target.format === 'text') {
    return { ok: true, value: typed };
  }
  try {
    return { ok: true, value: JSON.parse(typed) };
  } catch (e) {
    return { ok: false, error: `${target.label} is edited as JSON: ${(e as Error).message}` };
  }
}

/** The kernel request for the one cell that forks `run` at `at` with `value` as the edit of `target`
 * (`replay`: how its tools answer, written into the cell's `ws.fork(..., replay=...)`; none for a fork
 * that takes no policy, a CORAL message's or a ToolSelf stage's). */
export function forkCellRequest(
  run: string,
  at: ForkAt,
  target: IEditTarget,
  value: unknown,
  replay?: ReplayChoice
): Record<string, unknown> {
  if (!isRunId(run)) {
    throw new Error(`not a run id: ${run}`);
  }
  return {
    request: 'fork_cell',
    run,
    ...('stage' in at ? { stage: Math.floor(at.stage) } : { step: Math.floor(at.step) }),
    kind: target.kind,
    ...(target.action !== undefined ? { action: target.action } : {}),
    ...(target.field ? { field: target.field } : {}),
    value,
    ...(replay ? { replay } : {})
  };
}

/** A `fork_cell` reply checked: the cell's code, or an error message. */
export function parseForkCell(reply: unknown): { ok: true; code: string } | { ok: false; error: string } {
  const o = (reply ?? {}) as Record<string, unknown>;
  if (o.type === 'error') {
    return { ok: false, error: text(o.message) || 'the kernel refused this edit' };
  }
  if (o.type !== 'fork_cell' || typeof o.code !== 'string' || !o.code) {
    return { ok: false, error: 'the kernel sent no fork cell' };
  }
  return { ok: true, code: o.code };
}
