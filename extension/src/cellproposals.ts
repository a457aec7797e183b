/**
 * The messages of the comm target `tea_notebook.cells` (issue 29: the agent works in the notebook)
 * and what the page computes from them: validation of the kernel's messages, the page's replies,
 * the badge of an agent's cell, the diff of an edit proposal and the conflict check before an edit
 * is applied. The kernel side is `tea_notebook/notebook/cells_comm.py`; the shapes are fixed in the
 * shared design of issue 29.
 *
 * Pure functions, no DOM and no JupyterLab: unit-tested with node's test runner. cells.ts puts them
 * into the notebook.
 */

export const CELLS_TARGET = 'tea_notebook.cells';

/** What a proposal asks: a new cell, an edit of an existing cell, or a run of a cell as it is. */
export type ProposalKind = 'new' | 'edit' | 'run';

/** One proposal of an agent, as the kernel sends it. */
export interface IProposal {
  id: string;
  run: string;
  step: number;
  kind: ProposalKind;
  /** the agent's name (shown in the badge) */
  agent: string;
  /** edit / run: the target cell; new: '' */
  cell_id: string;
  /** new: the id of the cell to insert below ('' : at the end) */
  after: string;
  code: string;
  /** edit: a unified diff from the kernel (the page shows its own, from the cell's source now) */
  diff: string;
  explanation: string;
  /** 'ask' | 'read' | 'auto' */
  mode: string;
  /** the first approval in this run grants it cell runs (the Run button says so) */
  needs_grant: boolean;
  /** edit: sha256 (hex) of the source the agent read ('' when the kernel sent none) */
  base_hash: string;
  /** in a `pending` reply: the person already decided (its cell is running); no bar */
  decided: boolean;
}

/** The `tea` entry of an agent cell's metadata: saved with the notebook, so badges survive a reopen. */
export interface ITeaCellMeta {
  proposal: string;
  run: string;
  step: number;
  status: string;
  agent: string;
  kind?: ProposalKind;
}

/** A message from the kernel, validated. */
export type KernelMessage =
  | { type: 'cells_request'; id: string }
  | { type: 'proposal'; proposal: IProposal }
  | { type: 'settled'; proposal: string; status: string }
  | { type: 'pending'; proposals: IProposal[] }
  | { type: 'error'; message: string }
  | { type: 'invalid'; error: string };

const KINDS: readonly string[] = ['new', 'edit', 'run'];

function str(v: unknown): string {
  return typeof v === 'string' ? v : v === null || v === undefined ? '' : String(v);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A proposal from the kernel's JSON, or the reason it is not one. */
export function parseProposal(v: unknown): IProposal | string {
  if (!isRecord(v)) {
    return 'a proposal must be an object';
  }
  const id = str(v.id);
  if (!id) {
    return 'a proposal needs an id';
  }
  const kind = str(v.kind || 'new');
  if (!KINDS.includes(kind)) {
    return `proposal ${id}: unknown kind ${JSON.stringify(kind)} (new, edit or run)`;
  }
  if (kind !== 'new' && !str(v.cell_id)) {
    return `proposal ${id}: a ${kind} proposal needs the target cell_id`;
  }
  if (typeof v.code !== 'string' && kind !== 'run') {
    return `proposal ${id}: code must be a string`;
  }
  const step = Number(v.step);
  return {
    id,
    run: str(v.run),
    step: Number.isFinite(step) ? step : 0,
    kind: kind as ProposalKind,
    agent: str(v.agent),
    cell_id: str(v.cell_id),
    after: str(v.after),
    code: str(v.code),
    diff: str(v.diff),
    explanation: str(v.explanation),
    mode: str(v.mode) || 'ask',
    needs_grant: v.needs_grant === true,
    base_hash: str(v.base_hash).toLowerCase(),
    decided: v.decided === true
  };
}

/** A comm message from the kernel (its `data`), validated; `invalid` names what is wrong. */
export function parseKernelMessage(data: unknown): KernelMessage {
  if (!isRecord(data)) {
    return { type: 'invalid', error: 'a message must be an object' };
  }
  switch (data.type) {
    case 'cells_request':
      return { type: 'cells_request', id: str(data.id) };
    case 'proposal': {
      const p = parseProposal(data.proposal);
      return typeof p === 'string' ? { type: 'invalid', error: p } : { type: 'proposal', proposal: p };
    }
    case 'settled':
      if (!str(data.proposal)) {
        return { type: 'invalid', error: 'settled: no proposal id' };
      }
      return { type: 'settled', proposal: str(data.proposal), status: str(data.status) };
    case 'pending': {
      if (!Array.isArray(data.proposals)) {
        return { type: 'invalid', error: 'pending: proposals must be a list' };
      }
      const proposals: IProposal[] = [];
      for (const item of data.proposals) {
        const p = parseProposal(item);
        if (typeof p === 'string') {
          return { type: 'invalid', error: `pending: ${p}` };
        }
        proposals.push(p);
      }
      return { type: 'pending', proposals };
    }
    case 'error':
      return { type: 'error', message: str(data.message) || 'the kernel reported an error' };
    default:
      return { type: 'invalid', error: `unknown message type ${JSON.stringify(str(data.type))}` };
  }
}

/** The `tea` metadata of a cell, or null when it is not an agent's cell. */
export function parseTeaMeta(v: unknown): ITeaCellMeta | null {
  if (!isRecord(v) || !str(v.proposal)) {
    return null;
  }
  const step = Number(v.step);
  const kind = str(v.kind);
  return {
    proposal: str(v.proposal),
    run: str(v.run),
    step: Number.isFinite(step) ? step : 0,
    status: str(v.status) || 'pending',
    agent: str(v.agent),
    ...(KINDS.includes(kind) ? { kind: kind as ProposalKind } : {})
  };
}

/**
 * Whether a cell's `tea` metadata is that of proposal `p`: the same id in the same run (ids start
 * again at p1 in a new kernel, and a saved notebook keeps the cells of earlier kernels).
 */
export function isCellOf(meta: ITeaCellMeta | null, p: { id: string; run: string }): boolean {
  return !!meta && meta.proposal === p.id && (!meta.run || !p.run || meta.run === p.run);
}

/** The metadata a proposal's cell carries while it waits. */
export function teaMetaFor(p: IProposal, status = 'pending'): ITeaCellMeta {
  return { proposal: p.id, run: p.run, step: p.step, status, agent: p.agent, kind: p.kind };
}

/** A run id as the badge shows it (its first 8 characters, as the sidebar and panels do). */
export function shortRun(run: string): string {
  return run.length > 8 ? run.slice(0, 8) : run;
}

/** The badge of an agent cell: "agent NAME · run R · step S" (parts the metadata lacks left out). */
export function badgeText(meta: ITeaCellMeta): string {
  const parts = [`agent ${meta.agent || '?'}`];
  if (meta.run) {
    parts.push(`run ${shortRun(meta.run)}`);
  }
  if (meta.step) {
    parts.push(`step ${meta.step}`);
  }
  return parts.join(' · ');
}

/** The badge's status word. */
export function statusText(status: string): string {
  switch (status) {
    case 'pending':
      return 'waiting for you';
    case 'running':
      return 'running';
    case 'ran':
      return 'ran';
    case 'edited':
      return 'edited and ran';
    case 'rejected':
      return 'rejected';
    case 'conflict':
      return 'conflict';
    case 'stopped':
      return 'stopped';
    case 'expired':
      return 'no longer waiting';
    default:
      return status;
  }
}

/** The bar's title: what the agent asks of this cell. */
export function barTitle(p: IProposal): string {
  const who = `agent ${p.agent || '?'}`;
  switch (p.kind) {
    case 'edit':
      return `${who} proposes an edit of this cell`;
    case 'run':
      return `${who} asks to run this cell`;
    default:
      return `${who} proposes this cell`;
  }
}

/** The Run button's label: the first approval of a run also lets it run cells (the kernel.write grant). */
export function runLabel(p: IProposal): string {
  return p.needs_grant ? 'Run (lets this run run cells)' : 'Run';
}

/** The status a cell's badge takes after it ran: edited when what ran differs from what was proposed. */
export function ranStatus(proposed: string, ran: string): 'ran' | 'edited' {
  return proposed.replace(/\s+$/, '') === ran.replace(/\s+$/, '') ? 'ran' : 'edited';
}

/** One line of a diff: ' ' kept, '-' removed, '+' added. */
export interface IDiffLine {
  kind: ' ' | '-' | '+';
  text: string;
}

function splitLines(text: string): string[] {
  return text === '' ? [] : text.replace(/\n$/, '').split('\n');
}

/** A line diff of `before` → `after` (longest common subsequence; at most ~2,000 × 2,000 lines
 * compared, beyond that the middle shows as removed then added). */
export function lineDiff(before: string, after: string): IDiffLine[] {
  const a = splitLines(before);
  const b = splitLines(after);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) {
    head++;
  }
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) {
    tail++;
  }
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  const out: IDiffLine[] = a.slice(0, head).map(text => ({ kind: ' ', text }));
  if (midA.length * midB.length > 4_000_000) {
    out.push(...midA.map(text => ({ kind: '-' as const, text })), ...midB.map(text => ({ kind: '+' as const, text })));
  } else {
    // lcs[i][j]: length of the longest common subsequence of midA[i:] and midB[j:]
    const lcs: number[][] = Array.from({ length: midA.length + 1 }, () => new Array(midB.length + 1).fill(0));
    for (let i = midA.length - 1; i >= 0; i--) {
      for (let j = midB.length - 1; j >= 0; j--) {
        lcs[i][j] = midA[i] === midB[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < midA.length || j < midB.length) {
      if (i < midA.length && j < midB.length && midA[i] === midB[j]) {
        out.push({ kind: ' ', text: midA[i] });
        i++;
        j++;
      } else if (i < midA.length && (j === midB.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
        out.push({ kind: '-', text: midA[i] }); // removals first, as unified diffs show them
        i++;
      } else {
        out.push({ kind: '+', text: midB[j] });
        j++;
      }
    }
  }
  out.push(...a.slice(a.length - tail).map(text => ({ kind: ' ' as const, text })));
  return out;
}

/**
 * The diff an edit proposal shows: from the cell's source now to the proposed code, computed here
 * (the kernel's `diff` is for front ends without the page's cells, and the trajectory).
 */
export function proposalDiff(p: IProposal, currentSource: string): IDiffLine[] {
  return lineDiff(currentSource, p.code);
}

/** sha256 of `text` (UTF-8) as lowercase hex: the kernel's `base_hash` of a cell's source. */
export async function sha256Hex(text: string): Promise<string> {
  const digest = await globalThis.crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), b => b.toString(16).padStart(2, '0')).join('');
}

/**
 * Whether an edit's target changed since the agent read it: against the proposal's `base_hash`
 * when the kernel sent one, else against the source the cell had when the proposal was shown (also
 * where the page has no WebCrypto: a page served over plain HTTP from another host; the kernel checks
 * the hash of `base_source` all the same).
 */
export async function editConflict(p: IProposal, current: string, shownSource: string): Promise<boolean> {
  if (p.base_hash && globalThis.crypto?.subtle) {
    return (await sha256Hex(current)) !== p.base_hash;
  }
  return current !== shownSource;
}

/** The message the person's conflict shows (the person's text is never overwritten). */
export function conflictText(cellId: string): string {
  return `conflict: cell ${cellId} changed since the agent read it; your text is kept and nothing ran`;
}

/** An nbformat output, as much of it as the page looks at. */
export interface IOutput {
  output_type?: string;
  ename?: string;
  evalue?: string;
  [key: string]: unknown;
}

/** Whether a cell's last output is an error (the cell shows "Fix with agent"). */
export function lastOutputIsError(outputs: readonly IOutput[]): boolean {
  const last = outputs[outputs.length - 1];
  return !!last && last.output_type === 'error';
}

/** The cell "Fix with agent" inserts and runs below a failing cell. */
export function fixCommand(cellId: string): string {
  if (!/^[\w-]+$/.test(cellId)) {
    throw new Error(`cannot hand cell ${JSON.stringify(cellId)} to an agent: its id has unexpected characters`);
  }
  return `%tea fix ${cellId}`;
}

/** A cell as the page describes it in its `cells` reply. */
export interface ICellSnapshot {
  id: string;
  index: number;
  cell_type: string;
  source: string;
  execution_count: number | null;
  outputs: unknown[];
  tea: ITeaCellMeta | null;
}

/**
 * Outputs as the kernel is sent them: streams and errors whole; a result's or display's `text/plain`
 * whole and its other types by name only (empty), so a run's trajectory or an image is not copied to
 * the kernel each time the agent looks at the notebook (the kernel reads text only).
 */
export function slimOutputs(outputs: readonly IOutput[]): IOutput[] {
  return outputs.map(out => {
    const data = out.data;
    if (!isRecord(data)) {
      return out;
    }
    const slim: Record<string, unknown> = {};
    for (const [mime, value] of Object.entries(data)) {
      slim[mime] = mime === 'text/plain' ? value : '';
    }
    return { ...out, data: slim };
  });
}

/** The reply to a `cells_request`. */
export function cellsReply(id: string, cells: ICellSnapshot[]): Record<string, unknown> {
  return { type: 'cells', id, cells };
}

/** The page's `shown` message: the proposal is in the notebook (or why not, in `error`). */
export function shownMessage(proposal: string, cellId: string, now: number, error = ''): Record<string, unknown> {
  return { type: 'shown', proposal, cell_id: cellId, t_page: now, ...(error ? { error } : {}) };
}

/** The person's decision. `base_source` (edits) is the target's source at the click. */
export function decisionMessage(
  proposal: string,
  decision: 'run' | 'reject',
  source: string,
  baseSource?: string
): Record<string, unknown> {
  return {
    type: 'decision',
    proposal,
    decision,
    source,
    ...(baseSource !== undefined ? { base_source: baseSource } : {})
  };
}

/** What the page sends when the approved cell's execute reply arrived. */
export function executedMessage(
  proposal: string,
  cellId: string,
  executionCount: number | null,
  ok: boolean,
  outputs: unknown[]
): Record<string, unknown> {
  return { type: 'executed', proposal, cell_id: cellId, execution_count: executionCount, ok, outputs };
}

/** Where a new cell goes: below `after` when the notebook has it, else at the end. */
export function insertIndex(ids: readonly string[], after: string): number {
  const i = after ? ids.indexOf(after) : -1;
  return i >= 0 ? i + 1 : ids.length;
}

/** Statuses after which a proposal asks nothing more (its bar goes). */
export const FINAL_STATUSES: readonly string[] = ['ran', 'edited', 'rejected', 'conflict', 'stopped', 'expired'];
