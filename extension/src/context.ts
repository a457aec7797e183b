/**
 * What the mime renderer needs from the application: the notebook tracker (to find the notebook
 * panel that owns an output, its kernel and its cell) and a way to open a trajectory in the main
 * area. The plugin (plugin.ts) fills this in on activation; the mime extension (mime.ts) reads it.
 * Both modules come from the same federated bundle, so they share this module's state.
 */

import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel } from '@jupyterlab/services';

let tracker: INotebookTracker | null = null;
let app: JupyterFrontEnd | null = null;

export function setTracker(t: INotebookTracker, application?: JupyterFrontEnd): void {
  tracker = t;
  app = application ?? null;
}

/** The server's root folder (JupyterLab's page config), '' when unknown. */
function serverRoot(): string {
  try {
    const node = document.getElementById('jupyter-config-data');
    const root = node ? (JSON.parse(node.textContent || '{}').serverRoot as string) : '';
    return (root || '').replace(/\\/g, '/').replace(/\/+$/, '');
  } catch {
    return '';
  }
}

/**
 * A file of a run's folder as a path the file browser can open (relative to the server root), or
 * null when the folder is outside it. `name` comes from the payload: no '..' segments.
 */
export function serverPath(folder: string, name: string): string | null {
  const root = serverRoot();
  const dir = folder.replace(/\\/g, '/');
  if (!root || !(dir === root || dir.startsWith(root + '/')) || name.split('/').includes('..')) {
    return null;
  }
  return `${dir.slice(root.length + 1)}/${name}`.replace(/^\/+/, '');
}

/** Open a file in JupyterLab (its default viewer). */
export function openPath(path: string): void {
  void app?.commands.execute('docmanager:open', { path });
}

/** Views outside a notebook (a run opened from the sidebar, the branches table or an evaluation's
 * table, in the main area) and the notebook whose kernel they ask and where their forks go. */
const bound = new WeakMap<HTMLElement, NotebookPanel>();

/** Tie a view outside any notebook (`node`, its root) to `panel`: its context, Fork and "edit and
 * fork" buttons use that notebook's kernel, and the cells they insert go at its end. */
export function bindNotebook(node: HTMLElement, panel: NotebookPanel): void {
  bound.set(node, panel);
}

/** The notebook panel whose DOM contains `node` (an output of one of its cells), or the one a view
 * outside any notebook was tied to (`bindNotebook`), if any (and still open). */
export function panelFor(node: HTMLElement): NotebookPanel | null {
  if (!tracker || !node.isConnected) {
    return null;
  }
  const owner = tracker.find(panel => panel.node.contains(node));
  if (owner) {
    return owner;
  }
  for (let n: HTMLElement | null = node; n; n = n.parentElement) {
    const panel = bound.get(n);
    if (panel) {
      return panel.isDisposed ? null : panel;
    }
  }
  return null;
}

/** The kernel of the notebook that owns `node`. */
export function kernelFor(node: HTMLElement): Kernel.IKernelConnection | null {
  return panelFor(node)?.sessionContext.session?.kernel ?? null;
}

/**
 * Put a code cell holding `source` below the cell whose output holds `node` (at the end of the tied
 * notebook for a view outside any notebook), make it the active cell and, with `run`, run it (as a
 * person would: the notebook's run-cell command). False when `node` has no notebook.
 */
export async function insertCellBelow(node: HTMLElement, source: string, run: boolean): Promise<boolean> {
  const panel = panelFor(node);
  const notebook = panel?.content;
  if (!panel || !notebook?.model) {
    return false;
  }
  const owner = notebook.widgets.findIndex(cell => cell.node.contains(node));
  const index = owner >= 0 ? owner + 1 : notebook.model.sharedModel.cells.length;
  notebook.model.sharedModel.insertCell(index, { cell_type: 'code', source });
  notebook.activeCellIndex = index;
  if (app && (run || owner < 0)) {
    app.shell.activateById(panel.id); // run-cell runs the current notebook's cell; the new cell shows there
  }
  if (run && app) {
    await app.commands.execute('notebook:run-cell');
  }
  return true;
}

/** Seconds to wait for the kernel's answer to a request (it answers once the cell it runs has ended). */
const REQUEST_TIMEOUT = 60;

/**
 * Ask the kernel of the notebook holding `node` (the comm target `tea_notebook.sidebar`, one comm per
 * request) and resolve with its first reply whose `type` is in `types`, or with an error reply
 * `{type: 'error', message}` (no kernel, no comm target, no answer in time).
 */
export function askKernel(
  node: HTMLElement,
  data: Record<string, unknown>,
  types: string[]
): Promise<Record<string, unknown>> {
  const kernel = kernelFor(node);
  if (!kernel) {
    return Promise.resolve({ type: 'error', message: 'no kernel for this notebook (is it open?)' });
  }
  return new Promise(resolve => {
    let comm: ReturnType<typeof kernel.createComm>;
    let done = false;
    const finish = (reply: Record<string, unknown>): void => {
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
      () => finish({ type: 'error', message: `the kernel did not answer within ${REQUEST_TIMEOUT} s (is it busy?)` }),
      REQUEST_TIMEOUT * 1000
    );
    try {
      comm = kernel.createComm('tea_notebook.sidebar');
    } catch (e) {
      finish({ type: 'error', message: `cannot ask the kernel: ${(e as Error).message}` });
      return;
    }
    comm.onMsg = msg => {
      const reply = msg.content.data as Record<string, unknown>;
      const ours = reply.type === 'error' && (reply.request === data.request || !reply.request);
      if (types.includes(String(reply.type)) || ours) {
        finish(reply);
      } // a 'state' push (the sidebar's) is not for us
    };
    comm.onClose = () =>
      finish({ type: 'error', message: 'the kernel has no tea_notebook comm (run %load_ext tea_notebook there)' });
    comm.open(data as Parameters<typeof comm.open>[0]);
  });
}
