/**
 * The mime renderer for application/vnd.tea.trajectory+json. It is `safe` (data only, no HTML from
 * the payload, no script), so it renders in trusted and untrusted notebooks alike; rank 0 puts it
 * before the bundle's text/html fallback.
 */

import { NotebookActions } from '@jupyterlab/notebook';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { kernelFor, openPath, panelFor, serverPath } from './context';
import { LiveState, wholePayload } from './live';
import { IRunMeta, MIME_TYPE, forkCommand } from './model';
import { IViewHost, TrajectoryView } from './view';

/** The kernel's comm target for the sidebar (tea_notebook.notebook.sidebar_comm); it also serves stored trajectories. */
const SIDEBAR_COMM = 'tea_notebook.sidebar';

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
    this.model = model;
    // a live update may carry only what changed: merged into what this page holds of the run
    this.view.show(this.live.apply(model.data[this.mimeType], meta), meta);
    return Promise.resolve();
  }

  /**
   * The notebook is being saved: if this output holds a partial live update, put the merged
   * trajectory in its place (whole, with its timings), so the saved notebook has the run so far.
   * The save serialises the notebook right after it says it started, in the same turn.
   */
  private onSave(_: unknown, state: string): void {
    const traj = this.live.traj;
    const model = this.model;
    const data = model?.data[this.mimeType] as { partial?: boolean } | undefined;
    if (state !== 'started' || !traj || !model || !data || data.partial !== true) {
      return;
    }
    const whole = wholePayload(traj);
    const meta: Record<string, unknown> = { ...this.meta, latency: whole.latency };
    delete meta.base;
    model.setData({
      data: { ...model.data, [this.mimeType]: whole.data } as IRenderMime.IMimeModel['data'],
      metadata: { ...model.metadata, [this.mimeType]: meta } as IRenderMime.IMimeModel['metadata']
    });
  }

  protected onAfterAttach(): void {
    // the owning notebook is known only once the output is in the page: follow its kernel's status
    // so that Stop shows while the kernel is busy with the run and goes away when it is idle
    const panel = panelFor(this.node);
    if (panel && panel !== this.panel) {
      this.panel?.sessionContext.statusChanged.disconnect(this.onStatus, this);
      this.panel?.context.saveState.disconnect(this.onSave, this);
      this.panel = panel;
      panel.sessionContext.statusChanged.connect(this.onStatus, this);
      panel.context.saveState.connect(this.onSave, this);
    }
    this.view.refreshHeader();
    this.view.relayout();
    this.catchUp();
  }

  dispose(): void {
    this.panel?.sessionContext.statusChanged.disconnect(this.onStatus, this);
    this.panel?.context.saveState.disconnect(this.onSave, this);
    this.view.dispose();
    super.dispose();
  }

  private onStatus(): void {
    this.view.refreshHeader();
    this.catchUp();
  }

  /**
   * A live view restored from a notebook saved mid-run (the page was reloaded) gets no more updates:
   * they go to the page that ran the cell. Once the kernel that runs it is idle, the run has ended:
   * ask that kernel (the sidebar's comm target) for the stored trajectory and put it in the output.
   */
  private catchUp(): void {
    const run = this.meta.run_id;
    const kernel = kernelFor(this.node);
    const model = this.model;
    if (
      this.caughtUp ||
      !run ||
      !model ||
      !this.live.traj?.live ||
      !kernel ||
      kernel.status !== 'idle' ||
      kernel.id !== this.meta.kernel
    ) {
      return;
    }
    this.caughtUp = true;
    let comm: ReturnType<typeof kernel.createComm>;
    try {
      comm = kernel.createComm(SIDEBAR_COMM);
    } catch {
      return;
    }
    comm.onMsg = msg => {
      const reply = msg.content.data as Record<string, unknown>;
      const metadata = (reply.metadata ?? {}) as Record<string, unknown>;
      if (reply.type === 'trajectory' && reply.run === run && !this.isDisposed) {
        model.setData({
          data: { ...model.data, [this.mimeType]: reply.data } as IRenderMime.IMimeModel['data'],
          metadata: { ...model.metadata, [this.mimeType]: metadata[this.mimeType] } as IRenderMime.IMimeModel['metadata']
        });
        void this.renderModel(model);
      }
      try {
        comm.close();
      } catch {
        /* the kernel is gone */
      }
    };
    comm.open({ request: 'trajectory', run });
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
  private model: IRenderMime.IMimeModel | null = null;
  private live = new LiveState();
  private caughtUp = false;
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
