/**
 * The mime renderer for application/vnd.tea.trajectory+json. It is `safe` (data only, no HTML from
 * the payload, no script), so it renders in trusted and untrusted notebooks alike; rank 0 puts it
 * before the bundle's text/html fallback.
 */

import { NotebookActions } from '@jupyterlab/notebook';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { kernelFor, openPath, panelFor, serverPath } from './context';
import { IRunMeta, MIME_TYPE, forkCommand } from './model';
import { IViewHost, TrajectoryView } from './view';

export class TrajectoryRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this.mimeType = options.mimeType;
    this.addClass('jp-TeaTrajectory');
    const host: IViewHost = {
      canStop: () => this.kernelBusy(),
      stop: async () => {
        const kernel = kernelFor(this.node);
        if (!kernel) {
          throw new Error('no kernel for this notebook');
        }
        await kernel.interrupt();
      },
      fork: (step: number) => this.fork(step),
      fileLink: (name: string) =>
        this.meta.folder ? serverPath(this.meta.folder, name) : null,
      openFile: (name: string) => {
        const path = this.meta.folder ? serverPath(this.meta.folder, name) : null;
        if (path) {
          openPath(path);
        }
      }
    };
    this.view = new TrajectoryView(host);
    this.node.append(this.view.node);
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const meta = ((model.metadata ?? {})[this.mimeType] ?? {}) as IRunMeta;
    this.meta = meta;
    this.view.update(model.data[this.mimeType], meta);
    return Promise.resolve();
  }

  protected onAfterAttach(): void {
    // the owning notebook is known only once the output is in the page: follow its kernel's status
    // so that Stop shows while the kernel is busy with the run and goes away when it is idle
    const panel = panelFor(this.node);
    if (panel && panel !== this.panel) {
      this.panel?.sessionContext.statusChanged.disconnect(this.onStatus, this);
      this.panel = panel;
      panel.sessionContext.statusChanged.connect(this.onStatus, this);
    }
    this.view.refreshHeader();
    this.view.relayout();
  }

  dispose(): void {
    this.panel?.sessionContext.statusChanged.disconnect(this.onStatus, this);
    this.view.dispose();
    super.dispose();
  }

  private onStatus(): void {
    this.view.refreshHeader();
  }

  private kernelBusy(): boolean {
    const kernel = kernelFor(this.node);
    if (!kernel || kernel.status !== 'busy') {
      return false;
    }
    // the live payload names the kernel running the run (a background run names none: interrupting
    // the kernel would stop whatever cell runs now, not the run)
    return !!this.meta.kernel && this.meta.kernel === kernel.id;
  }

  private async fork(step: number): Promise<void> {
    const panel = panelFor(this.node);
    const run = this.meta.run_id;
    if (!panel || !run) {
      return;
    }
    const notebook = panel.content;
    const index = notebook.widgets.findIndex(cell => cell.node.contains(this.node));
    if (index < 0) {
      return;
    }
    notebook.activeCellIndex = index;
    NotebookActions.insertBelow(notebook);
    notebook.activeCell!.model.sharedModel.setSource(forkCommand(run, step));
    await NotebookActions.run(notebook, panel.sessionContext);
  }

  private mimeType: string;
  private meta: IRunMeta = {};
  private panel: ReturnType<typeof panelFor> = null;
  readonly view: TrajectoryView;
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  defaultRank: 0,
  createRenderer: options => new TrajectoryRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'tea-notebook-jupyterlab:trajectory',
  description: 'Renders tea_notebook agent trajectories.',
  rendererFactory,
  rank: 0,
  dataType: 'json'
};

export default extension;
