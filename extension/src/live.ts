/**
 * Live updates that carry only what changed.
 *
 * While a run goes, the kernel sends the trajectory whole once, then partial payloads
 * (`"partial": true`): each run's header, the steps events touched since the update before, new or
 * changed stages, threads and messages, and the sub-runs that changed (each with its `index` among
 * its parent's children). The output's metadata numbers them: `seq`, and `base`, the update a partial
 * one applies to. `LiveState` keeps the merged trajectory; every renderer showing the same run in
 * this page (a cell's output, a "new view" of it) shares it, so a renderer made mid-run starts from
 * what the page already has. A partial update on a state it does not follow (a missed update, an
 * output restored from a notebook saved mid-run) is merged all the same, with `incomplete` set,
 * until a whole payload comes.
 *
 * Pure functions, no DOM and no JupyterLab: unit-tested with node's test runner.
 */

import {
  ILatencyTree,
  IRunMeta,
  IStep,
  ITrajectory,
  ParseResult,
  parsePayload
} from './model';

/** The header fields a partial update overrides when it carries them. */
const HEADER: (keyof ITrajectory)[] = [
  'agent',
  'task',
  'model',
  'status',
  'answer',
  'prompt_tokens',
  'completion_tokens',
  'cost',
  'tokens_estimated',
  'live',
  'forkable',
  'files',
  'todo',
  'forked_from',
  'note',
  'stop_reason',
  'divergence'
];

function upsert<T>(into: T[], items: T[], key: (x: T) => unknown): void {
  const at = new Map(into.map((x, i) => [key(x), i]));
  for (const item of items) {
    const i = at.get(key(item));
    if (i === undefined) {
      at.set(key(item), into.length);
      into.push(item);
    } else {
      into[i] = item;
    }
  }
}

/**
 * Merge a parsed partial payload (`delta`, with `raw` its JSON) into `base`, in place. Returns false
 * when something could not be placed (a sub-run whose place the base does not have yet).
 */
export function mergeTrajectory(
  base: ITrajectory,
  delta: ITrajectory,
  raw: Record<string, unknown>
): boolean {
  let ok = true;
  for (const key of HEADER) {
    if (key in raw) {
      (base as unknown as Record<string, unknown>)[key] = delta[key];
    }
  }
  const late: IStep[] = [];
  for (const s of delta.steps) {
    // the usual case: the last step again (it went on) or a new one after it
    const n = base.steps.length;
    if (!n || s.number > base.steps[n - 1].number) {
      base.steps.push(s);
    } else if (s.number === base.steps[n - 1].number) {
      base.steps[n - 1] = s;
    } else {
      late.push(s);
    }
  }
  if (late.length) {
    upsert<IStep>(base.steps, late, s => s.number);
    base.steps.sort((a, b) => a.number - b.number);
  }
  upsert(base.stages, delta.stages, s => s.index);
  upsert(base.threads, delta.threads, t => t.id);
  if (delta.messages.length) {
    upsert(base.messages, delta.messages, m => m.seq);
    base.messages.sort((a, b) => a.seq - b.seq);
  }
  const rawKids = Array.isArray(raw.children) ? (raw.children as Record<string, unknown>[]) : [];
  delta.children.forEach((child, i) => {
    const at = child.index ?? base.children.length;
    const rawChild = (rawKids[i] ?? {}) as Record<string, unknown>;
    if (at < base.children.length && child.partial) {
      ok = mergeTrajectory(base.children[at], child, rawChild) && ok;
    } else if (at < base.children.length) {
      base.children[at] = child; // sent whole
    } else {
      if (at > base.children.length) {
        ok = false; // sub-runs before it were missed: it goes last for now
      }
      child.partial = false;
      base.children.push(child);
    }
  });
  base.partial = false;
  return ok;
}

interface IEntry {
  seq: number;
  traj: ITrajectory;
  complete: boolean;
}

/** The merged live trajectories of this page, by run id (a few: old ones are dropped). */
const SHARED = new Map<string, IEntry>();
const KEEP = 16;

function remember(run: string | null | undefined, entry: IEntry): void {
  if (!run) {
    return;
  }
  SHARED.delete(run);
  SHARED.set(run, entry);
  while (SHARED.size > KEEP) {
    SHARED.delete(SHARED.keys().next().value as string);
  }
}

/** For tests: forget every run. */
export function forgetLiveRuns(): void {
  SHARED.clear();
}

/** One renderer's view of a live run: feed it every payload the output gets. */
export class LiveState {
  /** The trajectory to show for a payload and its metadata (whole, or merged from a partial one). */
  apply(data: unknown, meta: IRunMeta = {}): ParseResult {
    const parsed = parsePayload(data, meta);
    if (!parsed.ok) {
      return parsed;
    }
    const traj = parsed.traj;
    const run = meta.run_id ?? null;
    const seq = typeof meta.seq === 'number' ? meta.seq : null;
    if (!traj.partial) {
      this.entry = { seq: seq ?? -1, traj, complete: true };
      if (seq !== null && traj.live) {
        remember(run, this.entry);
      } else if (run) {
        SHARED.delete(run); // the run ended: nothing more will be merged
      }
      return { ok: true, traj };
    }
    // a sibling view of this output (or this renderer, before it was remade) may hold the run already
    let entry = (run ? SHARED.get(run) : undefined) ?? this.entry;
    if (entry && seq !== null && entry.seq === seq) {
      this.entry = entry; // merged already
      return { ok: true, traj: entry.traj };
    }
    if (!entry) {
      // nothing to merge into: a renderer made mid-run, an output restored from a notebook saved mid-run
      entry = { seq: -1, traj: emptyLike(traj), complete: false };
    }
    const complete = entry.complete && meta.base === entry.seq;
    const placed = mergeTrajectory(entry.traj, traj, data as Record<string, unknown>);
    entry.seq = seq ?? entry.seq;
    entry.complete = complete && placed;
    entry.traj.incomplete = !entry.complete;
    this.entry = entry;
    remember(run, entry);
    return { ok: true, traj: entry.traj };
  }

  /** The merged trajectory (null before the first payload). */
  get traj(): ITrajectory | null {
    return this.entry?.traj ?? null;
  }

  private entry: IEntry | null = null;
}

function emptyLike(t: ITrajectory): ITrajectory {
  return {
    ...t,
    steps: [],
    stages: [],
    threads: [],
    messages: [],
    children: [],
    partial: false
  };
}

/** A merged trajectory as a whole payload and its latency tree (what a saved notebook keeps). */
export function wholePayload(traj: ITrajectory): { data: Record<string, unknown>; latency: ILatencyTree } {
  const latency: ILatencyTree = {
    steps: traj.steps.map(s => s.latency ?? 0),
    tools: traj.steps.map(s => s.tool_time ?? 0),
    children: []
  };
  const children: Record<string, unknown>[] = [];
  for (const c of traj.children) {
    const sub = wholePayload(c);
    children.push(sub.data);
    latency.children!.push(sub.latency);
  }
  const data: Record<string, unknown> = { ...traj, children };
  const now = Date.now();
  data.steps = traj.steps.map(s => {
    const { latency: _l, tool_time: _t, ...rest } = s; // eslint-disable-line @typescript-eslint/no-unused-vars
    if (!rest.actions.some(a => a.running_since !== undefined)) {
      return rest;
    }
    // a call still running keeps how long it had run (the page's clock is no use to a later reader)
    const actions = rest.actions.map(a => {
      const { running_since: since, ...kept } = a;
      return since === undefined ? kept : { ...kept, running_for: Math.round((now - since) / 100) / 10 };
    });
    return { ...rest, actions };
  });
  for (const key of ['partial', 'index', 'incomplete']) {
    delete data[key];
  }
  return { data, latency };
}
