/**
 * The agent works in the notebook (issue 29), the page's side: one comm per notebook panel to the
 * kernel's target `tea_notebook.cells` (registered by `%load_ext tea_notebook`). The kernel asks for
 * the notebook's cells, sends an agent's proposals (a new cell, an edit of a cell, a run of a cell)
 * and says when one is settled; the page inserts proposed cells through the notebook model (marked by
 * `metadata.tea`), shows a badge on every agent cell and an approval bar (Run / Edit / Reject) on the
 * cell a proposal is about, and runs an approved cell as the person would (its outputs, execution
 * count and history are the notebook's own). After a reload it asks for the pending proposals and
 * puts their cells and bars back. A cell whose last output is an error offers "Fix with agent", which
 * inserts and runs `%tea fix CELL_ID` below it.
 *
 * Everything shown from the kernel or the notebook goes in as text (textContent), never as HTML.
 */

import { Notification } from '@jupyterlab/apputils';
import type { Cell, ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel, KernelMessage } from '@jupyterlab/services';

import {
  CELLS_TARGET,
  FINAL_STATUSES,
  ICellSnapshot,
  IDiffLine,
  IProposal,
  IOutput,
  ITeaCellMeta,
  badgeText,
  barTitle,
  cellsReply,
  conflictText,
  decisionMessage,
  editConflict,
  executedMessage,
  fixCommand,
  insertIndex,
  isCellOf,
  lastOutputIsError,
  parseKernelMessage,
  parseTeaMeta,
  proposalDiff,
  ranStatus,
  runLabel,
  shownMessage,
  slimOutputs,
  statusText,
  teaMetaFor
} from './cellproposals';
import { CellRunWatch } from './cellrun';
import { el } from './dom';

/** Where a cell's decorations live (created once per cell widget). */
interface IDecor {
  badge: HTMLElement | null;
  bar: HTMLElement | null;
  barKey: string;
  fix: HTMLElement | null;
}

/** Kernel states after which the kernel's side is gone (its comm and its runs with it). */
const GONE = new Set(['restarting', 'autorestarting', 'dead', 'terminating']);

/** The page's side of one notebook panel. */
export class NotebookCells {
  constructor(readonly panel: NotebookPanel) {
    const session = panel.sessionContext;
    session.kernelChanged.connect(this.onKernelChanged, this);
    session.iopubMessage.connect(this.onIOPub, this);
    session.statusChanged.connect(this.onStatus, this);
    NotebookActions.executed.connect(this.onExecuted, this);
    void session.ready.then(() => this.setKernel(session.session?.kernel ?? null));
    void panel.context.ready.then(() => {
      const model = panel.content.model;
      model?.cells.changed.connect(this.scheduleDecorate, this);
      this.decorateAll();
    });
    panel.disposed.connect(() => this.dispose());
  }

  /** Whether the kernel's side answers (the comm is open and the kernel has answered on it). */
  get connected(): boolean {
    return !!this.comm && !this.comm.isDisposed && this.answered;
  }

  private dispose(): void {
    NotebookActions.executed.disconnect(this.onExecuted, this);
    this.closeComm();
    this.kernel = null;
  }

  /** A cell of this notebook ran: it may now fail (Fix with agent) or fail no more. */
  private onExecuted(_: unknown, args: { notebook: unknown; cell: Cell }): void {
    if (args.notebook === this.panel.content) {
      this.decorate(args.cell);
    }
  }

  private onKernelChanged(): void {
    this.setKernel(this.panel.sessionContext.session?.kernel ?? null);
  }

  private setKernel(kernel: Kernel.IKernelConnection | null): void {
    if (kernel === this.kernel) {
      return;
    }
    this.closeComm();
    this.forgetProposals();
    this.kernel = kernel;
    if (kernel) {
      this.connect();
    }
  }

  /** A restart ends the kernel's side: its proposals are gone; try again once it is idle. */
  private onStatus(_: unknown, status: Kernel.Status): void {
    if (GONE.has(status)) {
      this.closeComm();
      this.forgetProposals();
      this.restarted = true;
    } else if (status === 'idle' && this.restarted) {
      this.restarted = false;
      this.connect();
    }
  }

  /** After a cell ran (maybe `%load_ext tea_notebook`), try the comm again if it is not open. */
  private onIOPub(_: unknown, msg: KernelMessage.IMessage): void {
    if (msg.channel !== 'iopub') {
      return;
    }
    if (this.cellRuns.ended(msg, !this.comm)) {
      this.connect();
    }
  }

  private connect(): void {
    const kernel = this.kernel;
    if (!kernel || this.comm || kernel.isDisposed) {
      return;
    }
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(CELLS_TARGET);
    } catch {
      return;
    }
    this.comm = comm;
    comm.onMsg = msg => this.onMessage(msg.content.data);
    comm.onClose = () => {
      if (this.comm === comm) {
        this.comm = null; // no target (tea_notebook not loaded) or the kernel closed it
        this.answered = false;
        this.decorateAll();
      }
    };
    comm.open({ hello: 1, notebook: this.panel.context.path });
    this.send({ type: 'pending_request' });
  }

  private closeComm(): void {
    const comm = this.comm;
    this.comm = null;
    this.answered = false;
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        /* the kernel is gone */
      }
    }
  }

  private send(data: Record<string, unknown>): boolean {
    if (!this.comm || this.comm.isDisposed) {
      return false;
    }
    this.comm.send(data as Parameters<Kernel.IComm['send']>[0]);
    return true;
  }

  private onMessage(data: unknown): void {
    if (!this.answered) {
      this.answered = true; // the kernel's side is there: failing cells offer Fix with agent
      this.scheduleDecorate();
    }
    const msg = parseKernelMessage(data);
    switch (msg.type) {
      case 'cells_request':
        this.send(cellsReply(msg.id, this.snapshots()));
        break;
      case 'proposal':
        this.show(msg.proposal, true);
        break;
      case 'pending':
        this.reconcile(msg.proposals);
        break;
      case 'settled':
        this.settle(msg.proposal, msg.status);
        break;
      case 'error':
        Notification.warning(`agent cells: ${msg.message}`, { autoClose: 8000 });
        break;
      case 'invalid':
        Notification.error(`agent cells: a message from the kernel was refused: ${msg.error}`, { autoClose: 8000 });
        break;
    }
  }

  // ---- the notebook's cells

  private get cells(): readonly Cell[] {
    return this.panel.content.widgets;
  }

  private metaOf(cell: Cell): ITeaCellMeta | null {
    return parseTeaMeta(cell.model.getMetadata('tea'));
  }

  private cellById(id: string): Cell | null {
    return this.cells.find(c => c.model.id === id) ?? null;
  }

  private cellOfProposal(p: IProposal): Cell | null {
    if (p.kind !== 'new') {
      return this.cellById(p.cell_id);
    }
    return this.cells.find(c => isCellOf(this.metaOf(c), p)) ?? null;
  }

  /** The waiting proposal this cell's bar is for: an edit or run of it, or the new cell it is. */
  private proposalOf(cell: Cell): IProposal | null {
    for (const p of this.proposals.values()) {
      if (p.kind !== 'new' && p.cell_id === cell.model.id) {
        return p;
      }
    }
    const meta = this.metaOf(cell);
    const p = meta ? this.proposals.get(meta.proposal) : undefined;
    return p && p.kind === 'new' && isCellOf(meta, p) ? p : null;
  }

  private snapshots(): ICellSnapshot[] {
    return this.cells.map((cell, index) => {
      const code = cell.model.type === 'code' ? (cell.model as ICodeCellModel) : null;
      return {
        id: cell.model.id,
        index,
        cell_type: cell.model.type,
        source: cell.model.sharedModel.getSource(),
        execution_count: code ? code.executionCount : null,
        outputs: code ? slimOutputs(code.outputs.toJSON() as IOutput[]) : [],
        tea: this.metaOf(cell)
      };
    });
  }

  private setStatus(cell: Cell, p: IProposal, status: string): void {
    cell.model.setMetadata('tea', { ...teaMetaFor(p, status) });
  }

  // ---- proposals

  /** Put a proposal in the notebook (its cell and bar) and tell the kernel where it is. */
  private show(p: IProposal, fresh: boolean): void {
    const model = this.panel.content.model;
    if (!model) {
      this.send(shownMessage(p.id, '', Date.now(), 'the notebook is not loaded'));
      return;
    }
    let cell = this.cellOfProposal(p);
    if (!cell && p.kind === 'new') {
      const index = insertIndex(
        this.cells.map(c => c.model.id),
        p.after
      );
      const metadata = { tea: { ...teaMetaFor(p) } };
      model.sharedModel.insertCell(index, { cell_type: 'code', source: p.code, metadata });
      cell = this.cells[index] ?? null;
    }
    if (!cell) {
      this.send(shownMessage(p.id, '', Date.now(), `cell ${p.cell_id} does not exist (deleted meanwhile?)`));
      return;
    }
    this.proposals.set(p.id, p);
    if (p.kind !== 'new' && !this.shownSource.has(p.id)) {
      this.shownSource.set(p.id, cell.model.sharedModel.getSource());
    }
    this.decorate(cell); // a conflict note of an earlier proposal stays in the bar until this one is decided
    this.send(shownMessage(p.id, cell.model.id, Date.now()));
    if (fresh) {
      // into view without taking the person's active cell or focus (scrollToCell would)
      void this.panel.content.scrollToItem(this.cells.indexOf(cell), 'smart').catch(() => undefined);
      if (p.mode === 'auto') {
        void this.approve(p.id);
      }
    }
  }

  /** The kernel's pending proposals after (re)connecting: cells and bars back; others no longer wait. */
  private reconcile(pending: IProposal[]): void {
    this.proposals.clear();
    for (const p of pending.filter(p => !p.decided)) {
      this.show(p, false);
    }
    for (const cell of this.cells) {
      const meta = this.metaOf(cell);
      // decided ones are running: their cells stay as they are
      const live = pending.some(p => isCellOf(meta, p));
      if (meta && (meta.status === 'pending' || meta.status === 'running') && !live) {
        cell.model.setMetadata('tea', { ...meta, status: 'expired' });
      }
    }
    this.decorateAll();
  }

  /** The kernel says a proposal is settled (maybe by another page, `%tea reject`, or a stopped run). */
  private settle(id: string, status: string): void {
    const p = this.proposals.get(id);
    this.proposals.delete(id);
    if (!p) {
      // decided here already; a page that did not show it may still hold its cell (waiting, or running)
      const cell = this.cells.find(c => {
        const meta = this.metaOf(c);
        return meta?.proposal === id && !FINAL_STATUSES.includes(meta.status);
      });
      const meta = cell ? this.metaOf(cell) : null;
      if (cell && meta && (meta.status === 'pending' || status === 'stopped')) {
        cell.model.setMetadata('tea', { ...meta, status });
      }
      return;
    }
    const cell = this.cellOfProposal(p);
    if (!cell) {
      return;
    }
    if (status === 'rejected') {
      this.undo(p, cell);
    } else if (status === 'conflict') {
      this.notes.set(cell.model.id, conflictText(cell.model.id));
      this.restoreOriginal(p, cell);
      this.decorate(cell);
    } else if (p.kind === 'new' || isCellOf(this.metaOf(cell), p)) {
      const meta = this.metaOf(cell);
      if (!meta || !FINAL_STATUSES.includes(meta.status)) {
        this.setStatus(cell, p, status === 'ran' ? ranStatus(p.code, cell.model.sharedModel.getSource()) : status);
      }
    } else {
      this.decorate(cell);
    }
  }

  /** Run: send the decision, apply an edit (unless the target changed: a conflict), run the cell. */
  async approve(id: string): Promise<void> {
    const p = this.proposals.get(id);
    const cell = p ? this.cellOfProposal(p) : null;
    if (!p || !cell || this.busy.has(id)) {
      return;
    }
    this.notes.delete(cell.model.id);
    if (!this.connected) {
      this.notes.set(cell.model.id, 'the kernel does not answer (restarted?): nothing ran');
      this.decorate(cell);
      return;
    }
    this.busy.add(id);
    let decided = false;
    try {
      const shared = cell.model.sharedModel;
      let source = shared.getSource();
      let base: string | undefined;
      if (p.kind === 'edit') {
        const original = this.original.get(id);
        if (original === undefined) {
          if (await editConflict(p, source, this.shownSource.get(id) ?? source)) {
            this.notes.set(cell.model.id, conflictText(cell.model.id));
            decided = this.send(decisionMessage(id, 'run', p.code, source)); // the kernel settles it as a conflict
            if (decided) {
              this.proposals.delete(id);
            }
            return;
          }
          base = source;
          this.original.set(id, source);
          shared.setSource(p.code);
          source = p.code;
        } else {
          base = original;
        }
      }
      decided = this.send(decisionMessage(id, 'run', source, base));
      if (!decided) {
        // still waiting: Run again, or Reject (which puts an applied edit's text back)
        this.notes.set(cell.model.id, 'the kernel does not answer (restarted?): nothing ran');
        return;
      }
      this.proposals.delete(id);
      this.setStatus(cell, p, 'running');
      const ran = await NotebookActions.runCells(this.panel.content, [cell], this.panel.sessionContext);
      const code = cell.model as ICodeCellModel;
      const outputs = code.outputs.toJSON() as IOutput[];
      const proposed = p.kind === 'run' ? (this.shownSource.get(id) ?? source) : p.code;
      this.setStatus(cell, p, ranStatus(proposed, source));
      const ok = ran && !outputs.some(o => o.output_type === 'error');
      this.send(executedMessage(id, cell.model.id, code.executionCount, ok, slimOutputs(outputs)));
    } finally {
      this.busy.delete(id);
      if (decided) {
        this.original.delete(id);
        this.shownSource.delete(id);
      }
      this.decorate(cell);
    }
  }

  /** Edit: a new cell's editor takes the focus; an edit proposal is applied first (unless it conflicts). */
  async edit(id: string): Promise<void> {
    const p = this.proposals.get(id);
    const cell = p ? this.cellOfProposal(p) : null;
    if (!p || !cell) {
      return;
    }
    if (p.kind === 'edit' && !this.original.has(id)) {
      const source = cell.model.sharedModel.getSource();
      if (await editConflict(p, source, this.shownSource.get(id) ?? source)) {
        this.notes.set(cell.model.id, conflictText(cell.model.id));
        this.proposals.delete(id);
        this.send(decisionMessage(id, 'run', p.code, source));
        this.decorate(cell);
        return;
      }
      this.original.set(id, source);
      cell.model.sharedModel.setSource(p.code);
      this.decorate(cell);
    }
    const notebook = this.panel.content;
    const index = this.cells.indexOf(cell);
    if (index >= 0) {
      notebook.activeCellIndex = index;
      notebook.deselectAll();
    }
    notebook.mode = 'edit';
    requestAnimationFrame(() => cell.editor?.focus());
  }

  /** Reject: the kernel hears it; an inserted cell goes, an applied edit is undone, the bar goes. */
  reject(id: string): void {
    const p = this.proposals.get(id);
    const cell = p ? this.cellOfProposal(p) : null;
    if (!p) {
      return;
    }
    this.send(decisionMessage(id, 'reject', cell ? cell.model.sharedModel.getSource() : ''));
    this.proposals.delete(id);
    if (cell) {
      this.notes.delete(cell.model.id);
      this.undo(p, cell);
    }
  }

  private undo(p: IProposal, cell: Cell): void {
    if (p.kind === 'new') {
      const index = this.cells.indexOf(cell);
      if (index >= 0) {
        this.panel.content.model?.sharedModel.deleteCell(index);
      }
    } else {
      this.restoreOriginal(p, cell);
      this.decorate(cell);
    }
    this.shownSource.delete(p.id);
  }

  private restoreOriginal(p: IProposal, cell: Cell): void {
    const original = this.original.get(p.id);
    if (original !== undefined) {
      cell.model.sharedModel.setSource(original);
      this.original.delete(p.id);
    }
  }

  /** Fix with agent: `%tea fix CELL_ID` in a new cell below the failing one, run. */
  async fix(cell: Cell): Promise<void> {
    const model = this.panel.content.model;
    const index = this.cells.indexOf(cell);
    if (!model || index < 0) {
      return;
    }
    let source: string;
    try {
      source = fixCommand(cell.model.id);
    } catch (e) {
      Notification.error((e as Error).message, { autoClose: 8000 });
      return;
    }
    model.sharedModel.insertCell(index + 1, { cell_type: 'code', source });
    const added = this.cells[index + 1];
    if (added) {
      this.panel.content.activeCellIndex = index + 1;
      await NotebookActions.runCells(this.panel.content, [added], this.panel.sessionContext);
    }
  }

  /** A kernel restart or a new kernel: nothing waits any more (the bars go; badges stay). */
  private forgetProposals(): void {
    if (!this.proposals.size && !this.notes.size) {
      return;
    }
    this.proposals.clear();
    this.original.clear();
    this.shownSource.clear();
    this.notes.clear();
    this.decorateAll();
  }

  // ---- decorations: badge, bar, "Fix with agent"

  private scheduleDecorate(): void {
    if (this.scheduled) {
      return;
    }
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.decorateAll();
    });
  }

  private decorateAll(): void {
    for (const cell of this.cells) {
      this.decorate(cell);
    }
  }

  private decorCell(cell: Cell): IDecor {
    let d = this.decor.get(cell);
    if (!d) {
      d = { badge: null, bar: null, barKey: '', fix: null };
      this.decor.set(cell, d);
      const redraw = (): void => this.decorate(cell);
      cell.model.metadataChanged.connect(redraw);
      const outputs = cell.model.type === 'code' ? (cell.model as ICodeCellModel).outputs : null;
      outputs?.changed.connect(redraw);
      cell.disposed.connect(() => {
        cell.model.metadataChanged.disconnect(redraw);
        outputs?.changed.disconnect(redraw);
      });
    }
    return d;
  }

  private decorate(cell: Cell): void {
    if (cell.isDisposed) {
      return;
    }
    const meta = this.metaOf(cell);
    const p = this.proposalOf(cell);
    const note = this.notes.get(cell.model.id) ?? '';
    const code = cell.model.type === 'code' ? (cell.model as ICodeCellModel) : null;
    // the last output's type only: toJSON() would copy every output (a run's whole trajectory) each time
    const last = code && code.outputs.length ? code.outputs.get(code.outputs.length - 1) : null;
    const failing = !!last && this.connected && lastOutputIsError([{ output_type: last.type }]);
    if (!meta && !p && !note && !failing && !this.decor.has(cell)) {
      return; // the common case: a cell the agent never touched
    }
    const d = this.decorCell(cell);
    // the badge
    if (meta) {
      if (!d.badge) {
        d.badge = el('div', 'tea-cell-badge');
      }
      const input = cell.node.querySelector(':scope > .jp-Cell-inputWrapper');
      if (d.badge.nextElementSibling !== input || !d.badge.isConnected) {
        cell.node.insertBefore(d.badge, input); // above the input (the cell's own parts come and go)
      }
      d.badge.textContent = '';
      d.badge.className = `tea-cell-badge tea-cell-status-${meta.status}`;
      d.badge.setAttribute('data-tea-proposal', meta.proposal);
      d.badge.setAttribute('data-tea-status', meta.status);
      d.badge.append(
        el('span', 'tea-cell-badge-who', badgeText(meta)),
        el('span', 'tea-cell-badge-status', statusText(meta.status))
      );
      cell.node.classList.add('tea-agent-cell');
    } else if (d.badge) {
      d.badge.remove();
      d.badge = null;
      cell.node.classList.remove('tea-agent-cell');
    }
    // the approval bar (or a note: a conflict)
    const key = p ? `${p.id}:${this.original.has(p.id)}:${this.busy.has(p.id)}:${note}` : note ? `note:${note}` : '';
    if (key !== d.barKey) {
      d.bar?.remove();
      d.bar = p ? this.bar(cell, p, note) : note ? this.noteBar(cell, note) : null;
      d.barKey = key;
      if (d.bar) {
        const outputs = cell.node.querySelector(':scope > .jp-Cell-outputWrapper');
        cell.node.insertBefore(d.bar, outputs);
      }
    }
    // Fix with agent (only where the kernel's side answers; not while a proposal waits here)
    const fixable = failing && !p;
    if (fixable && !d.fix) {
      d.fix = el('div', 'tea-cell-fix');
      const button = el('button', 'tea-cell-btn', 'Fix with agent');
      button.setAttribute('data-tea-action', 'fix');
      button.title = 'insert and run %tea fix for this cell: an agent proposes an edit, you approve it';
      button.addEventListener('click', ev => {
        ev.preventDefault();
        ev.stopPropagation();
        void this.fix(cell);
      });
      d.fix.append(button);
      cell.node.append(d.fix);
    } else if (!fixable && d.fix) {
      d.fix.remove();
      d.fix = null;
    }
  }

  private bar(cell: Cell, p: IProposal, note: string): HTMLElement {
    const bar = el('div', 'tea-cell-bar');
    bar.setAttribute('data-tea-proposal', p.id);
    bar.setAttribute('data-tea-kind', p.kind);
    const head = el('div', 'tea-cell-bar-head');
    head.append(el('span', 'tea-cell-bar-title', barTitle(p)));
    if (p.explanation) {
      head.append(el('span', 'tea-cell-bar-why', p.explanation));
    }
    bar.append(head);
    const applied = this.original.has(p.id);
    if (p.kind === 'edit') {
      const before = applied ? (this.original.get(p.id) ?? '') : cell.model.sharedModel.getSource();
      bar.append(diffNode(proposalDiff(p, before)));
      if (applied) {
        const hint = 'applied: change it if you like, then Run; Reject puts your text back';
        bar.append(el('div', 'tea-cell-bar-note', hint));
      }
    }
    if (note) {
      bar.append(el('div', 'tea-cell-bar-note tea-bad', note));
    }
    const buttons = el('div', 'tea-cell-bar-buttons');
    const busy = this.busy.has(p.id);
    const button = (action: string, text: string, title: string, onClick: () => void): HTMLButtonElement => {
      const b = el('button', `tea-cell-btn tea-cell-btn-${action}`, text);
      b.setAttribute('data-tea-action', action);
      b.title = title;
      b.disabled = busy;
      b.addEventListener('click', ev => {
        ev.preventDefault();
        ev.stopPropagation();
        onClick();
      });
      buttons.append(b);
      return b;
    };
    button('run', runLabel(p), 'run this cell now (its output goes back to the agent)', () => void this.approve(p.id));
    button('edit', 'Edit', 'change the code first, then Run', () => void this.edit(p.id));
    button('reject', 'Reject', 'the agent hears no; nothing runs', () => this.reject(p.id));
    bar.append(buttons);
    return bar;
  }

  private noteBar(cell: Cell, note: string): HTMLElement {
    const bar = el('div', 'tea-cell-bar tea-cell-bar-conflict');
    bar.append(el('div', 'tea-cell-bar-note tea-bad', note));
    const dismiss = el('button', 'tea-cell-btn', 'Dismiss');
    dismiss.setAttribute('data-tea-action', 'dismiss');
    dismiss.addEventListener('click', ev => {
      ev.preventDefault();
      ev.stopPropagation();
      this.notes.delete(cell.model.id);
      this.decorate(cell);
    });
    bar.append(dismiss);
    return bar;
  }

  private kernel: Kernel.IKernelConnection | null = null;
  private comm: Kernel.IComm | null = null;
  private answered = false;
  private cellRuns = new CellRunWatch();
  private restarted = false;
  private scheduled = false;
  /** proposals waiting for the person, by id */
  private proposals = new Map<string, IProposal>();
  /** edit / run proposals: the target's source when the proposal was shown */
  private shownSource = new Map<string, string>();
  /** edit proposals applied by Edit: the target's source before */
  private original = new Map<string, string>();
  /** proposals whose Run is under way */
  private busy = new Set<string>();
  /** a cell's note (a conflict), by cell id */
  private notes = new Map<string, string>();
  private decor = new WeakMap<Cell, IDecor>();
}

/** A diff as lines of text, each classed by kind (added, removed, kept). */
function diffNode(lines: IDiffLine[]): HTMLElement {
  const pre = el('pre', 'tea-cell-diff');
  const cls: Record<IDiffLine['kind'], string> = { '+': 'add', '-': 'del', ' ': 'ctx' };
  for (const line of lines) {
    const row = el('div', `tea-diff-${cls[line.kind]}`, `${line.kind} ${line.text}`);
    pre.append(row);
  }
  return pre;
}

/** Bridge every notebook panel (open now or later) to its kernel's `tea_notebook.cells` target. */
export function watchAgentCells(tracker: INotebookTracker): void {
  tracker.forEach(panel => new NotebookCells(panel));
  tracker.widgetAdded.connect((_, panel) => new NotebookCells(panel));
}
