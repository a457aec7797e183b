/**
 * The TEA sidebar: the current notebook's workspace (tools, agents, environments, runs, memory),
 * searchable, each item expandable (schema, versions, usage, provenance). It talks to the kernel
 * through the comm target `tea_notebook.sidebar` that `%load_ext tea_notebook` registers; the kernel
 * pushes a fresh state after every cell that changed the workspace (so when a run ends).
 *
 * A run opens in the main area from the sidebar's Runs section, and from a row of a run's branches
 * table (`%tea branches RUN`, `ws.branches(run)`) or a run id of an evaluation's table (each carries
 * `data-run`): the view is tied to the notebook it came from, so its "context", Fork and "edit and
 * fork" buttons ask that notebook's kernel and put their cells in it.
 *
 * The Evolution section (lineage.ts) shows the evolution lineage: asked for when it is opened and
 * again after each state push, one page at a time.
 */

import { Notification } from '@jupyterlab/apputils';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { CellRunWatch } from './cellrun';
import { askKernel, panelFor } from './context';
import { Detail, describeDetail, label } from './details';
import { el, highlighted } from './dom';
import { isRunId } from './forks';
import { LineageSection } from './lineage';

export const COMM_TARGET = 'tea_notebook.sidebar';

export interface IItem {
  name: string;
  title?: string;
  /** a second line under the title (a run: when, id prefix, steps, task) */
  subtitle?: string;
  description?: string;
  version?: number;
  details?: Record<string, unknown>;
}

export interface IWorkspaceState {
  workspace: string;
  sections: Record<string, IItem[]>;
}

const SECTIONS: [string, string][] = [
  ['tools', 'Tools'],
  ['agents', 'Agents'],
  ['envs', 'Environments'],
  ['runs', 'Runs'],
  ['memory', 'Memory']
];

/** Open a run's trajectory in the main area, tied to `notebook` (whose kernel sent it). */
export type OpenTrajectory = (
  run: string,
  data: unknown,
  metadata: Record<string, unknown>,
  notebook: NotebookPanel | null
) => void;

/** The elements of a notebook's outputs that open a run when clicked: a branches table's rows,
 * an evaluation table's run ids and a lineage's runs (tea_notebook.runtime.branches,
 * tea_notebook.eval.table, tea_notebook.evolve.lineage). */
export const RUN_LINKS = '.tea-branches [data-run], .tea-eval [data-run], .tea-lineage [data-run]';

/**
 * Open the run of a clicked run link (`RUN_LINKS`) in the main area: ask the kernel of the notebook
 * holding the link for its trajectory. Returns a function that stops listening.
 */
export function openRunLinks(open: OpenTrajectory): () => void {
  const onClick = (ev: MouseEvent): void => {
    const link = (ev.target as Element | null)?.closest?.(RUN_LINKS) as HTMLElement | null;
    const run = link?.getAttribute('data-run');
    const panel = link ? panelFor(link) : null;
    if (!link || !panel || !isRunId(run)) {
      return;
    }
    ev.preventDefault();
    void askKernel(link, { request: 'trajectory', run }, ['trajectory']).then(reply => {
      if (reply.type === 'trajectory') {
        open(String(reply.run), reply.data, (reply.metadata ?? {}) as Record<string, unknown>, panel);
      } else {
        Notification.error(`cannot open run ${run}: ${String(reply.message ?? 'no answer')}`, { autoClose: 8000 });
      }
    });
  };
  document.addEventListener('click', onClick);
  return () => document.removeEventListener('click', onClick);
}

export class TeaSidebar extends Widget {
  constructor(tracker: INotebookTracker, open: OpenTrajectory) {
    super();
    this.id = 'tea-sidebar';
    this.addClass('jp-TeaSidebar');
    this.title.caption = 'TEA workspace';
    this.open = open;
    this.statusNode = el('div', 'tea-sb-status tea-muted', 'Open a notebook.');
    this.search = el('input', 'tea-sb-search');
    this.search.type = 'search';
    this.search.placeholder = 'search tools, agents, runs…';
    this.search.addEventListener('input', () => this.render());
    const refresh = el('button', 'tea-sb-refresh', '⟳');
    refresh.title = 'refresh';
    refresh.addEventListener('click', () => this.request({ request: 'state' }));
    const top = el('div', 'tea-sb-top');
    top.append(el('b', '', 'TEA'), this.search, refresh);
    this.body = el('div', 'tea-sb-body');
    this.lineage = new LineageSection({
      send: data => this.request(data),
      openRun: run => this.request({ request: 'trajectory', run })
    });
    this.node.append(top, this.statusNode, this.body);
    tracker.currentChanged.connect((_, panel) => this.follow(panel), this);
    this.follow(tracker.currentWidget);
  }

  /** The last state the kernel sent (for tests). */
  get state(): IWorkspaceState | null {
    return this._state;
  }

  private follow(panel: NotebookPanel | null): void {
    if (panel === this.panel) {
      return;
    }
    this.panel?.sessionContext.kernelChanged.disconnect(this.onKernel, this);
    this.panel = panel;
    this.setKernel(panel?.sessionContext.session?.kernel ?? null);
    panel?.sessionContext.kernelChanged.connect(this.onKernel, this);
    if (!panel) {
      this.showStatus('Open a notebook.');
    }
  }

  private onKernel(): void {
    this.setKernel(this.panel?.sessionContext.session?.kernel ?? null);
  }

  private setKernel(kernel: Kernel.IKernelConnection | null): void {
    if (kernel === this.kernel) {
      return;
    }
    this.kernel?.iopubMessage.disconnect(this.onIOPub, this);
    this.closeComm();
    this.kernel = kernel;
    this._state = null;
    this.render();
    if (kernel) {
      kernel.iopubMessage.connect(this.onIOPub, this);
      this.connect();
    }
  }

  /** After a cell ran (maybe `%load_ext tea_notebook`), try the comm again if it is not open. */
  private onIOPub(_: Kernel.IKernelConnection, msg: KernelMessage.IIOPubMessage): void {
    if (this.cellRuns.ended(msg, !this.comm)) {
      this.connect();
    }
  }

  private connect(): void {
    const kernel = this.kernel;
    if (!kernel || this.comm || kernel.isDisposed) {
      return;
    }
    this.showStatus('Connecting… (run %load_ext tea_notebook in this notebook)');
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch {
      return;
    }
    this.comm = comm;
    comm.onMsg = msg => this.onMessage(msg.content.data as Record<string, unknown>);
    comm.onClose = () => {
      if (this.comm === comm) {
        this.comm = null;
        this.showStatus('Run %load_ext tea_notebook in this notebook to see its workspace.');
      }
    };
    comm.open({ request: 'state' });
  }

  private closeComm(): void {
    const comm = this.comm;
    this.comm = null;
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        /* the kernel is gone */
      }
    }
  }

  private request(data: Record<string, unknown>): void {
    if (this.comm && !this.comm.isDisposed) {
      this.comm.send(data as Parameters<Kernel.IComm['send']>[0]);
    } else {
      this.connect();
    }
  }

  private onMessage(data: Record<string, unknown>): void {
    if (data.type === 'state') {
      this._state = data.state as IWorkspaceState;
      this.showStatus(`workspace ${this._state.workspace}`);
      this.render();
      this.lineage.refresh(true);
    } else if (data.type === 'trajectory') {
      this.open(String(data.run), data.data, (data.metadata ?? {}) as Record<string, unknown>, this.panel);
    } else if (this.lineage.receive(data)) {
      // the Evolution section's reply (or its error, shown in the section)
    } else if (data.type === 'error') {
      this.showStatus(String(data.message));
    }
  }

  private showStatus(text: string): void {
    this.statusNode.textContent = text;
  }

  private render(): void {
    this.body.textContent = '';
    const state = this._state;
    if (!state) {
      return;
    }
    const q = this.search.value.trim().toLowerCase();
    for (const [key, label] of SECTIONS) {
      const items = (state.sections[key] ?? []).filter(
        it => !q || JSON.stringify(it).toLowerCase().includes(q)
      );
      const section = el('details', `tea-sb-section tea-sb-${key}`);
      section.open = this.openSections.has(key) || q !== '';
      section.addEventListener('toggle', () => {
        if (section.open) {
          this.openSections.add(key);
        } else {
          this.openSections.delete(key);
        }
      });
      section.append(el('summary', '', `${label} (${items.length})`));
      for (const it of items) {
        section.append(this.item(key, it));
      }
      this.body.append(section);
    }
    this.body.append(this.lineage.node);
  }

  private item(section: string, it: IItem): HTMLElement {
    const d = el('details', 'tea-sb-item');
    d.setAttribute('data-name', it.name);
    const id = `${section}:${it.name}`;
    d.open = this.openItems.has(id);
    d.addEventListener('toggle', () => {
      if (d.open) {
        this.openItems.add(id);
      } else {
        this.openItems.delete(id);
      }
    });
    const summary = el('summary');
    summary.append(el('span', 'tea-sb-name', it.title || it.name));
    if (it.version) {
      summary.append(el('span', 'tea-chip', `v${it.version}`));
    }
    if (it.subtitle) {
      summary.append(el('span', 'tea-sb-sub tea-muted', it.subtitle));
    }
    d.append(summary);
    if (it.description) {
      d.append(el('div', 'tea-sb-desc', it.description));
    }
    if (section === 'runs') {
      const open = el('button', 'tea-sb-open', 'open trajectory');
      open.setAttribute('data-run', it.name);
      open.addEventListener('click', ev => {
        ev.preventDefault();
        this.request({ request: 'trajectory', run: it.name });
      });
      d.append(open);
    }
    for (const [k, v] of Object.entries(it.details ?? {})) {
      const detail = describeDetail(k, v);
      if (!detail) {
        continue;
      }
      const row = el('div', `tea-sb-detail tea-sb-${detail.kind}`);
      row.setAttribute('data-detail', k);
      row.append(el('span', 'tea-muted', `${label(k)}: `), detailNode(detail));
      d.append(row);
    }
    return d;
  }

  private open: OpenTrajectory;
  private lineage: LineageSection;
  private panel: NotebookPanel | null = null;
  private kernel: Kernel.IKernelConnection | null = null;
  private comm: Kernel.IComm | null = null;
  private cellRuns = new CellRunWatch();
  private _state: IWorkspaceState | null = null;
  private openSections = new Set<string>(['tools', 'runs']);
  private openItems = new Set<string>();
  private statusNode: HTMLElement;
  private search: HTMLInputElement;
  private body: HTMLElement;
}

/** One detail as DOM (text always as text nodes): code highlighted, tables as tables. */
function detailNode(detail: Detail): Node {
  switch (detail.kind) {
    case 'code':
      return highlighted(detail.text);
    case 'pre':
      return el('pre', '', detail.text);
    case 'text':
      return document.createTextNode(detail.text);
    case 'list': {
      const list = el('span', 'tea-sb-list');
      for (const item of detail.items) {
        list.append(el('span', 'tea-chip', item));
      }
      return list;
    }
    case 'table': {
      const table = el('table', 'tea-sb-table');
      if (detail.columns.length) {
        const head = el('tr');
        for (const c of detail.columns) {
          head.append(el('th', '', c));
        }
        table.append(el('thead'));
        table.tHead?.append(head);
      }
      const body = el('tbody');
      for (const row of detail.rows) {
        const tr = el('tr');
        row.forEach((cell, i) => tr.append(el(!detail.columns.length && i === 0 ? 'th' : 'td', '', cell)));
        body.append(tr);
      }
      table.append(body);
      return table;
    }
  }
}
