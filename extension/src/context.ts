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

/** The notebook panel whose DOM contains `node` (an output of one of its cells), if any. */
export function panelFor(node: HTMLElement): NotebookPanel | null {
  if (!tracker || !node.isConnected) {
    return null;
  }
  return tracker.find(panel => panel.node.contains(node)) ?? null;
}

/** The kernel of the notebook that owns `node`. */
export function kernelFor(node: HTMLElement): Kernel.IKernelConnection | null {
  return panelFor(node)?.sessionContext.session?.kernel ?? null;
}

/**
 * Put a code cell holding `source` below the cell whose output holds `node`, make it the active
 * cell and, with `run`, run it (as a person would: the notebook's run-cell command). False when
 * `node` is not in a notebook's output.
 */
export async function insertCellBelow(node: HTMLElement, source: string, run: boolean): Promise<boolean> {
  const panel = panelFor(node);
  const notebook = panel?.content;
  if (!panel || !notebook?.model) {
    return false;
  }
  const index = notebook.widgets.findIndex(cell => cell.node.contains(node));
  if (index < 0) {
    return false;
  }
  notebook.model.sharedModel.insertCell(index + 1, { cell_type: 'code', source });
  notebook.activeCellIndex = index + 1;
  if (run && app) {
    app.shell.activateById(panel.id);
    await app.commands.execute('notebook:run-cell');
  }
  return true;
}
