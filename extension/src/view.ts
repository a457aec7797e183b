/**
 * The trajectory view: plain DOM, no JupyterLab imports (the mime renderer, the main-area panel and
 * the benchmark page all host it). Every model- or tool-written string goes in as a text node, so
 * nothing in a payload can become markup or script.
 *
 * One renderer: header, per-step charts, toolbar (view tabs, filters, search, jump) and one
 * virtualised list, whose rows come from the active view component (views.ts: steps, stages,
 * threads). Only the rows in the viewport exist in the DOM, so a 2,000-step run scrolls as smoothly
 * as a 5-step one.
 */

import { el } from './dom';
import { sampleHeader } from './evalsample';
import { lineageText } from './forks';
import { departureLine, editHeader, replayPicker, takesReplay } from './timetravel';
import { IRowContext, VIEWS, ViewName } from './views';
import {
  IFilter,
  IRunMeta,
  ITrajectory,
  NO_FILTER,
  ParseResult,
  Row,
  agentsOf,
  chartBars,
  fmtCost,
  fmtTokens,
  isEmpty,
  offsets,
  parsePayload,
  resumeCommand,
  runAt,
  runningCalls,
  runningText,
  stepTokens,
  stepsLabel,
  toolsOf,
  viewsOf,
  visibleRange
} from './model';

/** What the page around the view offers: Stop and Fork need a notebook and its kernel. */
export interface IViewHost {
  /** true when a Stop button can interrupt the run (the kernel that runs it is busy) */
  canStop?: () => boolean;
  stop?: () => Promise<void>;
  /** fork the root run at a step (present only when the output knows its run id) */
  fork?: (step: number) => Promise<void> | void;
  /** open a run's folder file (name relative to the run folder) */
  openFile?: (name: string) => void;
  /** the path a file would open at (null: it cannot be opened, e.g. outside the server root) */
  fileLink?: (name: string) => string | null;
}


const MAX_LIST_HEIGHT = 560;
const ESTIMATE: Record<Row['kind'], number> = {
  run: 30,
  step: 30,
  stage: 64,
  thread: 30,
  message: 52,
  note: 24
};


const SVG = 'http://www.w3.org/2000/svg';

export class TrajectoryView {
  readonly node: HTMLElement;

  constructor(host: IViewHost = {}) {
    this.host = host;
    this.node = el('div', 'tea-traj');
    this.node.setAttribute('data-tea', 'trajectory');
  }

  /** Render (or re-render in place, keeping expanded cards, filters and scroll) a payload. */
  update(data: unknown, meta: IRunMeta = {}): void {
    this.show(parsePayload(data, meta), meta);
  }

  /** Render a parsed payload (the mime renderer merges live updates first: see live.ts). */
  show(parsed: ParseResult, meta: IRunMeta = {}): void {
    this.meta = meta;
    if (!parsed.ok) {
      this.traj = null;
      this.renderError(parsed.error, parsed.raw);
      return;
    }
    this.traj = parsed.traj;
    const views = viewsOf(this.traj);
    if (!this.viewName || !views.includes(this.viewName)) {
      this.viewName = views[0];
    }
    if (!this.built) {
      this.build();
    }
    this.renderHeader();
    this.renderRunning();
    this.renderChart();
    this.renderToolbar();
    this.recomputeRows();
    this.renderList(true);
    this.renderFooter();
  }

  /** Measure and lay out the list again (the host calls this once the view is in the page). */
  relayout(): void {
    if (this.traj && this.built) {
      this.renderList(true);
    }
  }

  /** Re-render only the header (the host calls this when whether Stop is possible changes). */
  refreshHeader(): void {
    if (this.traj) {
      this.renderHeader();
    }
  }

  /**
   * Say how this view follows its live run, beside the header (null: nothing to say). The host calls
   * it when it re-attaches after a page reload, or when live updates cannot reach this view; `warn`
   * marks the latter.
   */
  setLiveNotice(notice: { text: string; warn?: boolean } | null): void {
    this.liveNotice = notice;
    this.refreshHeader();
  }

  /** Scroll to a step of the root run (or of any run when none of the root matches), expand it. */
  jumpTo(step: number): boolean {
    let idx = this.rows.findIndex(
      r => r.kind === 'step' && r.step.number === step && r.path.length === 0
    );
    if (idx < 0) {
      idx = this.rows.findIndex(r => r.kind === 'step' && r.step.number === step);
    }
    if (idx < 0) {
      return false;
    }
    const row = this.rows[idx];
    this.expanded.add(row.key);
    this.flash = row.key;
    this.heights.delete(row.key);
    this.offs = offsets(this.rows.map(r => this.heightOf(r)));
    this.list.scrollTop = this.offs[idx];
    this.renderList(true);
    return true;
  }

  /** For tests and the benchmark: the rows of the current view (after filters). */
  get rowCount(): number {
    return this.rows.length;
  }

  setFilter(filter: Partial<IFilter>): void {
    this.filter = { ...this.filter, ...filter };
    this.recomputeRows();
    this.list.scrollTop = 0;
    this.renderList(true);
    this.syncToolbar();
  }

  dispose(): void {
    window.clearInterval(this.runningTimer);
    this.runningTimer = 0;
    this.node.textContent = '';
    this.built = false;
  }

  // -- building blocks ----------------------------------------------------------------------------
  private build(): void {
    this.node.textContent = '';
    this.headerNode = el('div', 'tea-head');
    this.departureNode = el('div', 'tea-departure-slot');
    this.taskNode = el('div', 'tea-task');
    this.runningNode = el('div', 'tea-running');
    this.runningNode.setAttribute('data-tea', 'running');
    this.runningNode.hidden = true;
    this.chartNode = el('div', 'tea-chart');
    this.toolbarNode = el('div', 'tea-toolbar');
    this.list = el('div', 'tea-list');
    this.list.tabIndex = 0;
    this.spacer = el('div', 'tea-spacer');
    this.window = el('div', 'tea-window');
    this.list.append(this.spacer, this.window);
    this.list.addEventListener('scroll', () => this.onScroll());
    this.footerNode = el('div', 'tea-foot');
    this.node.append(
      this.headerNode,
      this.departureNode,
      this.taskNode,
      this.runningNode,
      this.chartNode,
      this.toolbarNode,
      this.list,
      this.footerNode
    );
    this.built = true;
  }

  private renderError(error: string, raw: string): void {
    this.built = false;
    this.node.textContent = '';
    const box = el('div', 'tea-error');
    box.setAttribute('data-tea', 'error');
    box.append(
      el('div', 'tea-error-title', `Cannot show this trajectory: ${error}`),
      el('pre', 'tea-raw', raw)
    );
    this.node.append(box);
  }

  private renderHeader(): void {
    const t = this.traj!;
    const h = this.headerNode;
    h.textContent = '';
    const status = t.live ? 'running' : t.status;
    const badge = el('span', `tea-status tea-status-${status.replace(/[^a-z_]/g, '')}`, status);
    badge.setAttribute('data-tea', 'status');
    h.append(badge, el('b', 'tea-agent', t.agent), el('span', 'tea-muted', t.model));
    const total = countSteps(t);
    h.append(
      el('span', '', stepsLabel(t.steps.length, total)),
      tokensNode(t.prompt_tokens + t.completion_tokens, t.tokens_estimated === true),
      el('span', '', fmtCost(t.cost))
    );
    if (t.evaluation) {
      h.append(sampleHeader(t.evaluation, badge)); // the scorer's verdict beside the agent's status (evalsample.ts)
    }
    const parent = t.forked_from || this.meta.forked_from;
    if (parent) {
      const link = el('span', 'tea-fork-link', lineageText(parent, t, this.meta.fork_step));
      link.setAttribute('data-tea', 'forked-from');
      h.append(link);
    }
    if (t.live && t.note) {
      const note = el('span', 'tea-muted', t.note);
      note.setAttribute('data-tea', 'note');
      h.append(note);
    }
    const edit = editHeader(t); // what the fork edited (timetravel.ts)
    if (edit) {
      h.append(edit);
    }
    if (t.live && t.incomplete) {
      const note = el('span', 'tea-muted tea-incomplete', 'some steps arrive with the next full update');
      note.title = 'this view started mid-run or missed an update: the whole run shows when it ends';
      note.setAttribute('data-tea', 'incomplete');
      h.append(note);
    }
    const run = this.meta.run_id;
    if (!t.live && t.status === 'interrupted' && t.stop_reason) {
      // why it stopped, and the command that goes on with it
      const reason = el('span', 'tea-stop-reason', t.stop_reason);
      reason.setAttribute('data-tea', 'stop-reason');
      if (run) {
        reason.append(' — ', el('code', 'tea-resume', resumeCommand(run)));
      }
      h.append(reason);
    }
    if (t.live && this.liveNotice) {
      const notice = el('span', this.liveNotice.warn ? 'tea-live-notice tea-warn' : 'tea-live-notice tea-muted');
      notice.textContent = this.liveNotice.text;
      notice.setAttribute('data-tea', 'live-notice');
      h.append(notice);
    }
    if (t.live && this.host.stop && this.host.canStop?.()) {
      const stop = el('button', 'tea-stop-btn', 'Stop');
      stop.title = 'Stop the run (interrupts the kernel)';
      stop.setAttribute('data-tea', 'stop');
      stop.addEventListener('click', () => {
        stop.disabled = true;
        stop.textContent = 'stopping…';
        this.host.stop!().catch((e: Error) => {
          stop.disabled = false;
          stop.textContent = 'Stop failed';
          stop.title = `could not interrupt: ${e.message}`;
        });
      });
      h.append(stop);
    }
    this.taskNode.textContent = '';
    this.taskNode.append(el('span', 'tea-muted', 'task: '), document.createTextNode(t.task));
    this.renderDeparture();
  }

  /** Under the header of a fork: where it first departs from its original, or that it reproduces it
   * (timetravel.ts `departureLine`); live as soon as the kernel says so. */
  private renderDeparture(): void {
    const line = departureLine(this.traj!, this.departureOpen, open => {
      this.departureOpen = open;
    });
    this.departureNode.replaceChildren(...(line ? [line] : []));
    this.departureNode.hidden = !line;
  }

  /**
   * The in-progress card: the tool calls of the live run that have not returned, with their seconds
   * counted here (the kernel sends a call once, with how long it had run; no update per second).
   */
  private renderRunning(): void {
    const calls = this.traj ? runningCalls(this.traj, Date.now()) : [];
    const node = this.runningNode;
    if (!calls.length) {
      node.hidden = true;
      node.textContent = '';
      window.clearInterval(this.runningTimer);
      this.runningTimer = 0;
      return;
    }
    node.hidden = false;
    node.textContent = '';
    node.append(el('span', 'tea-running-dot', '●'));
    for (const call of calls.slice(0, 3)) {
      const line = el('span', 'tea-running-call', runningText(call));
      line.setAttribute('data-tool', call.name);
      node.append(line);
    }
    if (calls.length > 3) {
      node.append(el('span', 'tea-muted', `+${calls.length - 3} more`));
    }
    if (!this.runningTimer) {
      this.runningTimer = window.setInterval(() => this.renderRunning(), 1000);
    }
  }

  private renderChart(): void {
    const t = this.traj!;
    this.chartNode.textContent = '';
    if (t.steps.length < 2) {
      return;
    }
    const series: Record<string, number[]> = {
      tokens: t.steps.map(stepTokens),
      cost: t.steps.map(s => s.cost),
      'model time': t.steps.map(s => s.latency ?? 0),
      'tool time': t.steps.map(s => s.tool_time ?? 0)
    };
    const width = Math.min(360, Math.max(40, t.steps.length * 14)); // thin bars, however few steps
    const height = 28;
    for (const [name, values] of Object.entries(series)) {
      if (!values.some(v => v > 0)) {
        continue;
      }
      const wrap = el('span', 'tea-series');
      wrap.title = `${name} per step (click a bar to jump to its step)`;
      const svg = document.createElementNS(SVG, 'svg');
      svg.setAttribute('width', String(width));
      svg.setAttribute('height', String(height));
      svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
      svg.setAttribute('class', `tea-spark tea-spark-${name.replace(' ', '-')}`);
      // one path for all bars: cheap to draw even for thousands of steps
      const d = chartBars(values, width, height)
        .filter(b => b.h > 0)
        .map(b => `M${b.x.toFixed(1)} ${b.y.toFixed(1)}h${b.w.toFixed(2)}v${b.h.toFixed(1)}h${(-b.w).toFixed(2)}z`)
        .join('');
      const path = document.createElementNS(SVG, 'path');
      path.setAttribute('d', d);
      svg.append(path);
      svg.addEventListener('click', (ev: MouseEvent) => {
        const box = svg.getBoundingClientRect();
        const i = Math.floor(((ev.clientX - box.left) / box.width) * t.steps.length);
        const step = t.steps[Math.max(0, Math.min(t.steps.length - 1, i))];
        this.jumpTo(step.number);
      });
      const max = Math.max(...values);
      const label = name === 'cost' ? fmtCost(max) : name.endsWith('time') ? `${max.toFixed(2)} s` : fmtTokens(max);
      wrap.append(el('span', 'tea-muted', `${name} (max ${label})`), svg);
      this.chartNode.append(wrap);
    }
  }

  private renderToolbar(): void {
    const t = this.traj!;
    const bar = this.toolbarNode;
    const views = viewsOf(t);
    const agents = agentsOf(t);
    const tools = toolsOf(t);
    const replay = Boolean(this.host.fork) && takesReplay(t);
    const signature = JSON.stringify([views, agents, tools, replay]);
    if (signature === this.toolbarSignature) {
      this.syncToolbar();
      return;
    }
    this.toolbarSignature = signature;
    bar.textContent = '';
    if (views.length > 1) {
      const tabs = el('span', 'tea-tabs');
      for (const v of views) {
        const b = el('button', 'tea-tab', v);
        b.setAttribute('data-view', v);
        b.addEventListener('click', () => {
          this.viewName = v;
          this.recomputeRows();
          this.list.scrollTop = 0;
          this.renderList(true);
          this.syncToolbar();
        });
        tabs.append(b);
      }
      bar.append(tabs);
    }
    const select = (name: keyof IFilter, label: string, plural: string, options: string[]): HTMLSelectElement => {
      const s = el('select', `tea-filter tea-filter-${name}`);
      s.title = `filter by ${label}`;
      s.append(new Option(`all ${plural}`, ''));
      for (const o of options) {
        s.append(new Option(o, o));
      }
      s.addEventListener('change', () => this.setFilter({ [name]: s.value } as Partial<IFilter>));
      bar.append(s);
      return s;
    };
    this.agentSelect = select('agent', 'agent', 'agents', agents);
    this.toolSelect = select('tool', 'tool', 'tools', tools);
    this.statusSelect = select('status', 'status', 'statuses', ['ok', 'error']);
    this.search = el('input', 'tea-search');
    this.search.type = 'search';
    this.search.placeholder = 'search…';
    this.search.addEventListener('input', () => {
      window.clearTimeout(this.searchTimer);
      this.searchTimer = window.setTimeout(() => this.setFilter({ query: this.search.value }), 120);
    });
    const jump = el('input', 'tea-jump');
    jump.type = 'number';
    jump.min = '1';
    jump.placeholder = 'step #';
    jump.title = 'jump to step';
    jump.addEventListener('keydown', (ev: KeyboardEvent) => {
      if (ev.key === 'Enter') {
        jump.classList.toggle('tea-bad', !this.jumpTo(Number(jump.value)));
      }
    });
    this.countNode = el('span', 'tea-muted tea-count');
    bar.append(this.search, jump, this.countNode);
    if (replay) {
      // how the steps' Fork buttons answer the tools (redrawn: their titles say it)
      bar.append(replayPicker(this.expanded, () => this.renderList(true)));
    }
    this.syncToolbar();
  }

  private syncToolbar(): void {
    for (const b of Array.from(this.toolbarNode.querySelectorAll<HTMLButtonElement>('.tea-tab'))) {
      b.classList.toggle('tea-active', b.dataset.view === this.viewName);
    }
    if (this.agentSelect) {
      this.agentSelect.value = this.filter.agent;
      this.toolSelect.value = this.filter.tool;
      this.statusSelect.value = this.filter.status;
      const applies = VIEWS[this.viewName!].filters;
      this.agentSelect.disabled = !applies.includes('agent');
      this.toolSelect.disabled = !applies.includes('tool');
      this.statusSelect.disabled = !applies.includes('status');
    }
    if (this.countNode) {
      const n = this.rows.filter(r => r.kind === 'step' || r.kind === 'message').length;
      const what = VIEWS[this.viewName!].unit;
      this.countNode.textContent = isEmpty(this.filter) ? `${n} ${what}` : `${n} ${what} match`;
    }
  }

  private renderFooter(): void {
    const t = this.traj!;
    const f = this.footerNode;
    f.textContent = '';
    if (t.todo) {
      const d = el('details', 'tea-todo');
      d.append(el('summary', '', 'todo.md'), el('pre', '', t.todo));
      f.append(d);
    }
    if (t.files && t.files.length) {
      const d = el('details', 'tea-files');
      d.append(el('summary', '', `files (${t.files.length})`));
      const ul = el('ul');
      for (const name of t.files) {
        const li = el('li');
        const link = this.host.fileLink?.(name);
        if (this.host.openFile && link) {
          const a = el('a', 'tea-file', name);
          a.title = `open ${link}`;
          a.href = '#';
          a.addEventListener('click', ev => {
            ev.preventDefault();
            this.host.openFile!(name);
          });
          li.append(a);
        } else {
          li.append(el('code', '', name));
        }
        ul.append(li);
      }
      d.append(ul);
      f.append(d);
    }
    if (t.answer) {
      const a = el('div', 'tea-answer');
      a.append(el('span', 'tea-muted', 'answer:'), el('pre', '', t.answer));
      f.append(a);
    }
  }

  // -- the virtualised list -----------------------------------------------------------------------
  private recomputeRows(): void {
    this.rows = VIEWS[this.viewName!].rows(this.traj!, this.filter, this.collapsed);
    this.offs = offsets(this.rows.map(r => this.heightOf(r)));
    this.syncToolbar();
  }

  private heightOf(row: Row): number {
    return this.heights.get(row.key) ?? ESTIMATE[row.kind];
  }

  private onScroll(): void {
    if (this.frame) {
      return;
    }
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.renderList(false);
    });
  }

  private renderList(force: boolean): void {
    const total = this.offs[this.offs.length - 1] ?? 0;
    this.list.style.height = `${Math.min(total, MAX_LIST_HEIGHT) + 2}px`;
    this.spacer.style.height = `${total}px`;
    const viewport = Math.min(total, MAX_LIST_HEIGHT) || MAX_LIST_HEIGHT;
    const [start, end] = visibleRange(this.offs, this.list.scrollTop, viewport);
    if (force) {
      this.nodes.clear(); // the rows' content may have changed: draw them again
    } else if (start === this.range[0] && end === this.range[1]) {
      return;
    }
    this.range = [start, end];
    // rows still in view keep their nodes (moved, not redrawn); only rows coming into view are drawn
    const kept = new Map<string, HTMLElement>();
    const fresh: [Row, HTMLElement][] = [];
    const before: HTMLElement[] = [];
    const after: HTMLElement[] = [];
    let reused = false; // fresh rows before the first reused one go above it, the others below
    for (let i = start; i < end; i++) {
      const row = this.rows[i];
      let node = this.nodes.get(row.key);
      if (!node) {
        node = this.renderRow(row);
        node.setAttribute('data-row', String(i));
        fresh.push([row, node]);
        (reused ? after : before).push(node);
      } else {
        reused = true;
      }
      kept.set(row.key, node);
    }
    if (force) {
      this.window.replaceChildren(...before);
    } else {
      for (const [key, node] of this.nodes) {
        if (!kept.has(key)) {
          node.remove();
        }
      }
      this.window.prepend(...before);
    }
    this.window.append(...after);
    this.nodes = kept;
    this.window.style.transform = `translateY(${this.offs[start] ?? 0}px)`;
    // measure the new rows; where they differ from the estimates, move the window and spacer
    let changed = false;
    for (const [row, node] of fresh) {
      const h = node.offsetHeight;
      if (h > 0 && Math.abs(h - this.heightOf(row)) > 0.5) {
        changed = true;
      }
      if (h > 0) {
        this.heights.set(row.key, h);
      }
    }
    if (changed && this.relayouts < 2) {
      this.relayouts++;
      this.offs = offsets(this.rows.map(r => this.heightOf(r)));
      this.renderList(false);
      this.window.style.transform = `translateY(${this.offs[this.range[0]] ?? 0}px)`;
      this.spacer.style.height = `${this.offs[this.offs.length - 1] ?? 0}px`;
      this.relayouts--;
    }
  }

  private toggle(key: string, set: Set<string>): void {
    if (set.has(key)) {
      set.delete(key);
    } else {
      set.add(key);
    }
    this.heights.delete(key);
    const top = this.list.scrollTop;
    this.recomputeRows();
    this.list.scrollTop = top;
    this.renderList(true);
  }

  private renderRow(row: Row): HTMLElement {
    const node = el('div', `tea-row tea-row-${row.kind}`);
    node.style.paddingLeft = `${row.depth * 18}px`;
    node.append(VIEWS[this.viewName!].render(row, this.rowContext()));
    return node;
  }

  /** What the view components need to draw a row and to react to it. */
  private rowContext(): IRowContext {
    return {
      traj: this.traj!,
      host: this.host,
      meta: this.meta,
      expanded: this.expanded,
      collapsed: this.collapsed,
      flash: this.flash,
      toggle: (key, set) => this.toggle(key, set),
      remeasure: key => {
        this.heights.delete(key);
        this.offs = offsets(this.rows.map(r => this.heightOf(r)));
        this.renderList(true);
      }
    };
  }

  private host: IViewHost;
  private meta: IRunMeta = {};
  private traj: ITrajectory | null = null;
  private built = false;
  private viewName: ViewName | null = null;
  private filter: IFilter = { ...NO_FILTER };
  private rows: Row[] = [];
  private offs: number[] = [0];
  private heights = new Map<string, number>();
  private expanded = new Set<string>();
  private collapsed = new Set<string>();
  private range: [number, number] = [-1, -1];
  private nodes = new Map<string, HTMLElement>();
  private frame = 0;
  private relayouts = 0;
  private flash = '';
  private searchTimer = 0;
  private toolbarSignature = '';
  private headerNode!: HTMLElement;
  private taskNode!: HTMLElement;
  private runningNode!: HTMLElement;
  private runningTimer = 0;
  private liveNotice: { text: string; warn?: boolean } | null = null;
  private departureNode!: HTMLElement;
  private departureOpen = false;
  private chartNode!: HTMLElement;
  private toolbarNode!: HTMLElement;
  private footerNode!: HTMLElement;
  private list!: HTMLElement;
  private spacer!: HTMLElement;
  private window!: HTMLElement;
  private agentSelect!: HTMLSelectElement;
  private toolSelect!: HTMLSelectElement;
  private statusSelect!: HTMLSelectElement;
  private search!: HTMLInputElement;
  private countNode!: HTMLElement;
}

function countSteps(t: ITrajectory): number {
  return t.steps.length + t.children.reduce((n, c) => n + countSteps(c), 0);
}


export { runAt };

/** The header's token count; estimates (scripted models) say so, as the HTML view does. */
function tokensNode(tokens: number, estimated: boolean): HTMLElement {
  if (!estimated) {
    return el('span', '', `${tokens.toLocaleString()} tokens`);
  }
  const node = el('span', 'tea-estimated', `~${tokens.toLocaleString()} tokens (estimated)`);
  node.title = 'estimated: scripted model, no tokenizer';
  node.setAttribute('data-tea', 'tokens');
  return node;
}
