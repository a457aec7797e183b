/**
 * The mime renderer for application/vnd.tea.trajectory+json. It is `safe` (data only, no HTML from
 * the payload, no script), so it renders in trusted and untrusted notebooks alike; rank 0 puts it
 * before the bundle's text/html fallback.
 */

import type { ICodeCellModel } from '@jupyterlab/cells';
import { NotebookActions } from '@jupyterlab/notebook';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { kernelFor, openPath, panelFor, serverPath } from './context';
import { LiveState, wholePayload } from './live';
import { IRunMeta, MIME_TYPE, forkCommand, resumeCommand } from './model';
import { IViewHost, TrajectoryView } from './view';

/** The kernel's comm target for the sidebar (tea_notebook.notebook.sidebar_comm); it also serves stored trajectories. */
const SIDEBAR_COMM = 'tea_notebook.sidebar';

/** Seconds a view re-attached after a reload waits for a live update before it says none came. */
const REATTACH_PATIENCE = 20;

/** The messages that carry a display's data (a live view's updates among them). */
const DISPLAY_MESSAGES = new Set(['display_data', 'update_display_data', 'execute_result']);

/** How a kernel status that ends whatever the kernel ran reads on the runs it interrupted. */
const ENDING: Record<string, string> = {
  restarting: 'interrupted: the kernel restarted',
  autorestarting: 'interrupted: the kernel restarted',
  dead: 'interrupted: the kernel stopped'
};

export class TrajectoryRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this.mimeType = options.mimeType;
    this.addClass('jp-TeaTrajectory');
    const host: IViewHost = {
      canStop: () => this.kernelBusy() || this.followingRun(),
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
    if (typeof meta.seq === 'number') {
      this.lastSeq = Math.max(this.lastSeq, meta.seq);
    }
    // a live update may carry only what changed: merged into what this page holds of the run
    this.view.show(this.live.apply(model.data[this.mimeType], meta), meta);
    this.reattach();
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
      this.panel?.sessionContext.connectionStatusChanged.disconnect(this.onConnection, this);
      this.panel?.context.saveState.disconnect(this.onSave, this);
      this.panel = panel;
      panel.sessionContext.statusChanged.connect(this.onStatus, this);
      panel.sessionContext.connectionStatusChanged.connect(this.onConnection, this);
      panel.context.saveState.connect(this.onSave, this);
    }
    this.view.refreshHeader();
    this.view.relayout();
    this.reattach();
    this.catchUp();
  }

  dispose(): void {
    this.detach();
    this.panel?.sessionContext.statusChanged.disconnect(this.onStatus, this);
    this.panel?.sessionContext.connectionStatusChanged.disconnect(this.onConnection, this);
    this.panel?.context.saveState.disconnect(this.onSave, this);
    this.view.dispose();
    super.dispose();
  }

  private onStatus(_: unknown, status?: Kernel.Status): void {
    const ending = status ? ENDING[status] : undefined;
    if (ending && this.live.traj?.live) {
      this.interrupted(ending);
      return;
    }
    this.view.refreshHeader();
    this.reattach();
    this.catchUp();
  }

  /** The page's connection to the kernel came up (a reloaded page): follow the run if it still goes. */
  private onConnection(): void {
    this.reattach();
    this.view.refreshHeader();
  }

  /**
   * The kernel running this live run restarted (or died): the run is over, whatever the kernel could
   * still send. Put it in the output as interrupted, with why and the command that goes on with it,
   * so the saved notebook says so too.
   */
  private interrupted(reason: string): void {
    const traj = this.live.traj;
    const model = this.model;
    if (!traj || !model || this.isDisposed) {
      return;
    }
    this.detach();
    const whole = wholePayload(traj);
    const data = { ...whole.data, status: 'interrupted', live: false, stop_reason: reason };
    const meta: Record<string, unknown> = { ...this.meta, latency: whole.latency, live: false };
    delete meta.base;
    model.setData({
      data: { ...model.data, [this.mimeType]: data } as IRenderMime.IMimeModel['data'],
      metadata: { ...model.metadata, [this.mimeType]: meta } as IRenderMime.IMimeModel['metadata']
    });
    this.caughtUp = true; // the new kernel knows nothing of the run's last moments: keep what this says
    void this.renderModel(model);
  }

  /**
   * A live view restored from a notebook saved mid-run (the page was reloaded while the run goes):
   * its cell is not executing in this page, so the run's updates reach no output here. They still
   * reach this page's kernel connection (every client sees the kernel's broadcasts): follow them and
   * merge those of this run. Where that cannot be done (another kernel runs this notebook now) the
   * view says plainly that live updates stopped.
   */
  private reattach(): void {
    const traj = this.live.traj;
    const run = this.meta.run_id;
    const kernel = kernelFor(this.node);
    // a background run (no kernel named: its cell ended at once) keeps its own way to its output
    if (this.attached || !this.meta.kernel || !traj?.live || !run || !kernel || this.executingHere()) {
      return;
    }
    if (kernel.id !== this.meta.kernel) {
      this.view.setLiveNotice({
        text:
          'live updates stopped: another kernel runs this notebook now; ' +
          'the run, if it goes on, is not followed here',
        warn: true
      });
      return;
    }
    if (kernel.status === 'idle' || kernel.status === 'dead') {
      return; // the run has ended (catchUp fetches it)
    }
    // busy, or not known yet: a page connecting to a kernel that runs a cell gets no status (nor a
    // kernel_info reply) until the cell ends, but it gets the kernel's broadcasts
    this.attached = kernel;
    this.followed = true;
    kernel.iopubMessage.connect(this.onIopub, this);
    this.view.setLiveNotice({ text: 're-attached after a reload: waiting for the next live update…' });
    this.patience = window.setTimeout(() => {
      if (this.attached && this.live.traj?.live) {
        this.view.setLiveNotice({
          text:
            `live updates stopped: none came in ${REATTACH_PATIENCE} s since the reload ` +
            '(a long model call sends none) — Stop interrupts the kernel',
          warn: true
        });
      }
    }, REATTACH_PATIENCE * 1000);
  }

  private detach(): void {
    window.clearTimeout(this.patience);
    this.attached?.iopubMessage.disconnect(this.onIopub, this);
    this.attached = null;
  }

  /** An update of this run broadcast by the kernel: put it in the output, as the cell's own would be. */
  private onIopub(_: unknown, msg: KernelMessage.IIOPubMessage): void {
    const model = this.model;
    if (!model || this.isDisposed || !DISPLAY_MESSAGES.has(msg.header.msg_type)) {
      return;
    }
    const content = msg.content as { data?: Record<string, unknown>; metadata?: Record<string, unknown> };
    const meta = (content.metadata?.[this.mimeType] ?? {}) as IRunMeta;
    if (!content.data?.[this.mimeType] || meta.run_id !== this.meta.run_id) {
      return;
    }
    if (typeof meta.seq === 'number' && meta.seq <= this.lastSeq) {
      return; // this page has it already
    }
    window.clearTimeout(this.patience);
    const raw = content.data[this.mimeType] as { partial?: boolean; live?: boolean };
    if (raw.partial && raw.live === false && this.live.traj?.incomplete) {
      // the run ended, and this view missed some of it while the page reloaded: rather than a run
      // that looks over with steps missing, wait for the whole of it (the cell's result, or the
      // stored trajectory once the kernel is idle)
      this.view.setLiveNotice({ text: 'the run ended: taking the whole of it…' });
      return;
    }
    this.view.setLiveNotice(null);
    model.setData({
      data: content.data as IRenderMime.IMimeModel['data'],
      metadata: { ...model.metadata, ...content.metadata } as IRenderMime.IMimeModel['metadata']
    });
    void this.renderModel(model);
    if (!raw.partial && !this.live.traj?.live) {
      this.detach(); // the whole run, ended
    }
  }

  /** true while the cell holding this output is executing in this page (its updates come to it). */
  private executingHere(): boolean {
    const panel = panelFor(this.node);
    const cell = panel?.content.widgets.find(c => c.node.contains(this.node));
    if (!cell || cell.model.type !== 'code') {
      return true; // not a cell's output (a panel of its own): nothing to re-attach
    }
    return (cell.model as ICodeCellModel).executionState === 'running';
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
      !(this.live.traj?.live || this.followed) ||
      !kernel ||
      kernel.status !== 'idle' ||
      kernel.id !== this.meta.kernel
    ) {
      return;
    }
    this.caughtUp = true;
    this.detach();
    let comm: ReturnType<typeof kernel.createComm>;
    try {
      comm = kernel.createComm(SIDEBAR_COMM);
    } catch {
      return;
    }
    let answered = false;
    comm.onClose = () => {
      if (!answered && this.live.traj?.live && !this.isDisposed) {
        // the kernel has no tea_notebook loaded: it restarted since the run, or never ran it
        this.view.setLiveNotice({
          text:
            'live updates stopped: this kernel cannot tell how the run ended (it may have restarted) — ' +
            `%load_ext tea_notebook, then %tea show ${run} (or ${resumeCommand(run)})`,
          warn: true
        });
      }
    };
    comm.onMsg = msg => {
      answered = true;
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

  /** true while this view follows its run after a reload and the kernel has not said it is idle. */
  private followingRun(): boolean {
    const kernel = this.attached;
    return !!kernel && kernel === kernelFor(this.node) && kernel.status !== 'idle' && kernel.status !== 'dead';
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
  /** the kernel whose broadcasts this view follows since a reload (null: its cell's own updates) */
  private attached: Kernel.IKernelConnection | null = null;
  /** it followed its run since a reload: once the kernel is idle it takes the stored trajectory */
  private followed = false;
  /** the newest live update this view has (its `seq`) */
  private lastSeq = -1;
  private patience = 0;
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
