/**
 * The sidebar's Evolution section: the evolution lineage of tools, experiences and expert agents
 * (`ws.lineage()`), one page of assets at a time, each asset's versions as a tree (parent → child)
 * with its status; a node expands to the gate's evidence and the runs that made and used it (a run
 * opens its trajectory), and "roll back" first shows the plan and applies only on a second click.
 *
 * The kernel side is tea_notebook/notebook/sidebar_lineage.py: requests `lineage`, `lineage_node`,
 * `rollback`. The functions above `LineageSection` are pure (unit-tested without a DOM).
 */

import { el } from './dom';

export const LINEAGE_KINDS = ['tool', 'experience', 'agent'] as const;
export type LineageKind = (typeof LINEAGE_KINDS)[number];

/** One version as the kernel sends it (flags only when set). */
export interface ILineageNode {
  v: number;
  parent: number | null;
  status: string;
  as?: number;
  current?: boolean;
  made?: number;
  used?: number;
  gate?: string;
  weak?: boolean;
}

export interface ILineageAsset {
  name: string;
  nodes: ILineageNode[];
  /** versions older than the ones sent */
  older?: number;
  /** promoted, but no run used it since */
  unused?: boolean;
}

export interface ILineagePage {
  kind: LineageKind;
  query: string;
  offset: number;
  limit: number;
  total: number;
  assets: ILineageAsset[];
}

export interface IGateDecision {
  id: string;
  status: string;
  message: string;
  gain: number;
  ci: [number, number];
  level: number;
  n: number;
  epochs: number;
  underpowered: boolean;
  min_tasks: number;
  recheck_of?: string | null;
}

export interface INodeDetail extends Omit<ILineageNode, 'gate'> {
  key: string;
  score: string;
  gate: IGateDecision[];
  made_by: string[];
  used_by: { run: string; status: string; correct: boolean | null }[];
  used_total: number;
}

export interface IRollbackPlan {
  kind: LineageKind;
  name: string;
  version: number;
  applied: boolean;
  needs_confirm: boolean;
  head_before: number | null;
  lines: string[];
}

/** A node placed in its asset's tree: `depth` 0 for a root. */
export interface ILineageRow {
  node: ILineageNode;
  depth: number;
  label: string;
  chips: string[];
}

/**
 * An asset's versions as tree rows, depth first: each node under its parent (a parent not sent — an
 * older version left out — makes the node a root), children oldest first. Never loops, even on a
 * cycle in bad data: a node is placed once.
 */
export function lineageRows(asset: ILineageAsset): ILineageRow[] {
  const sent = new Set(asset.nodes.map(n => n.v));
  const children = new Map<number | null, ILineageNode[]>();
  for (const n of asset.nodes) {
    const parent = n.parent !== null && sent.has(n.parent) && n.parent !== n.v ? n.parent : null;
    children.set(parent, [...(children.get(parent) ?? []), n]);
  }
  const rows: ILineageRow[] = [];
  const placed = new Set<number>();
  const visit = (n: ILineageNode, depth: number): void => {
    if (placed.has(n.v)) {
      return;
    }
    placed.add(n.v);
    rows.push({ node: n, depth, label: nodeLabel(n), chips: nodeChips(n) });
    for (const child of children.get(n.v) ?? []) {
      visit(child, depth + 1);
    }
  };
  for (const root of children.get(null) ?? []) {
    visit(root, 0);
  }
  for (const n of asset.nodes) {
    visit(n, 0); // what a cycle left unplaced
  }
  return rows;
}

/** `v3 ← v1` (the version and the one it replaced). */
export function nodeLabel(n: ILineageNode): string {
  return n.parent !== null ? `v${n.v} ← v${n.parent}` : `v${n.v}`;
}

/** The short facts beside a node: promoted as, current, runs, the gate's last word. */
export function nodeChips(n: ILineageNode): string[] {
  const chips: string[] = [];
  if (n.as) {
    chips.push(`as v${n.as}`);
  }
  if (n.current) {
    chips.push('current');
  }
  if (n.made) {
    chips.push(`made by ${plural(n.made, 'run')}`);
  }
  chips.push(n.used ? `used by ${plural(n.used, 'run')}` : 'not used');
  if (n.gate) {
    chips.push(`gate: ${n.gate}${n.weak ? ' (underpowered)' : ''}`);
  }
  return chips;
}

/** The gate's evidence as label/value rows: decision, gain, interval, n, underpowered. */
export function evidenceRows(d: IGateDecision): [string, string][] {
  const signed = (x: number): string => (x >= 0 ? '+' : '') + x.toFixed(2);
  const pct = `${Math.round(d.level * 1000) / 10}%`;
  return [
    ['decision', d.recheck_of ? `${d.status} (re-check of ${d.recheck_of})` : d.status],
    ['gain', signed(d.gain)],
    [`${pct} interval`, `${signed(d.ci[0])} to ${signed(d.ci[1])}${d.ci[0] > 0 ? ' (excludes 0)' : ''}`],
    ['n', `${plural(d.n, 'held-out task')} × ${plural(d.epochs, 'epoch')}`],
    ['underpowered', d.underpowered ? `yes: about ${d.min_tasks} tasks needed` : 'no']
  ];
}

/** How a run that used a version ended, short: `✓` right, `✗` wrong, else its status unless success. */
export function runMark(status: string, correct: boolean | null): string {
  if (correct !== null) {
    return correct ? '✓' : '✗';
  }
  return status === 'success' ? '' : status;
}

/** `1–50 of 1,000` (or `none`). */
export function pageText(page: Pick<ILineagePage, 'offset' | 'total' | 'assets'>): string {
  if (!page.total) {
    return 'none';
  }
  const last = page.offset + page.assets.length;
  return `${page.offset + 1}–${last} of ${page.total.toLocaleString('en')}`;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** What the section asks the kernel, and what it opens. */
export interface ILineageHost {
  send(data: Record<string, unknown>): void;
  openRun(run: string): void;
}

/** The Evolution section of the sidebar: a `<details>` kept across the sidebar's re-renders. */
export class LineageSection {
  constructor(host: ILineageHost) {
    this.host = host;
    this.node = el('details', 'tea-sb-section tea-sb-evolution');
    this.summary = el('summary', '', 'Evolution');
    this.content = el('div', 'tea-lin');
    this.node.append(this.summary, this.content);
    this.node.addEventListener('toggle', () => {
      if (this.node.open) {
        this.refresh();
      }
    });
  }

  /** The page again, when the section is open; `stale`: after a state push (a run ended, a tool was
   * made), the expanded nodes are asked again too. */
  refresh(stale = false): void {
    if (stale) {
      this.details.clear();
    }
    if (this.node.open) {
      this.host.send({ request: 'lineage', kind: this.kind, offset: this.offset, limit: PAGE, query: this.query });
    }
  }

  /** A reply of the kernel (or an error naming a lineage request); false if it is not one. */
  receive(data: Record<string, unknown>): boolean {
    if (data.type === 'lineage') {
      this.page = data as unknown as ILineagePage;
      this.error = '';
      this.askOpenNodes(this.page);
    } else if (data.type === 'lineage_node') {
      const detail = data.node as INodeDetail;
      this.details.set(`${String(data.name)}@${detail.v}`, detail);
    } else if (data.type === 'rollback') {
      const plan = data as unknown as IRollbackPlan;
      this.plan = plan.applied ? null : plan;
      this.error = plan.applied ? '' : this.error;
      this.notice = plan.applied ? plan.lines.join('\n') : '';
      if (plan.applied) {
        this.refresh(true);
      }
    } else if (data.type === 'error' && ['lineage', 'lineage_node', 'rollback'].includes(String(data.request))) {
      this.error = String(data.message);
    } else {
      return false;
    }
    this.render();
    return true;
  }

  private askOpenNodes(page: ILineagePage): void {
    for (const asset of page.assets) {
      for (const n of asset.nodes) {
        const key = `${asset.name}@${n.v}`;
        if (this.openNodes.has(key) && !this.details.has(key)) {
          this.host.send({ request: 'lineage_node', kind: page.kind, name: asset.name, version: n.v });
        }
      }
    }
  }

  private render(): void {
    const page = this.page;
    this.summary.textContent = `Evolution${page ? ` (${page.total})` : ''}`;
    this.content.textContent = '';
    this.content.append(this.controls());
    if (this.notice) {
      this.content.append(el('pre', 'tea-lin-notice', this.notice));
    }
    if (this.error) {
      this.content.append(el('div', 'tea-lin-error', this.error));
    }
    if (!page) {
      this.content.append(el('div', 'tea-muted', 'loading…'));
      return;
    }
    if (!page.assets.length) {
      this.content.append(el('div', 'tea-muted', `no ${page.kind}s${page.query ? ` matching “${page.query}”` : ''}`));
    }
    for (const asset of page.assets) {
      this.content.append(this.asset(asset));
    }
  }

  private controls(): HTMLElement {
    const bar = el('div', 'tea-lin-controls');
    const kind = el('select', 'tea-lin-kind');
    for (const k of LINEAGE_KINDS) {
      const option = el('option', '', `${k}s`);
      option.value = k;
      option.selected = k === this.kind;
      kind.append(option);
    }
    kind.addEventListener('change', () => {
      this.kind = kind.value as LineageKind;
      this.offset = 0;
      this.details.clear();
      this.refresh();
    });
    const filter = el('input', 'tea-lin-filter');
    filter.type = 'search';
    filter.placeholder = 'filter by name';
    filter.value = this.query;
    filter.addEventListener('change', () => {
      this.query = filter.value.trim();
      this.offset = 0;
      this.refresh();
    });
    bar.append(kind, filter);
    const page = this.page;
    if (page && page.total > page.limit) {
      const prev = el('button', 'tea-lin-prev', '‹');
      prev.disabled = page.offset === 0;
      prev.addEventListener('click', () => this.go(Math.max(0, page.offset - page.limit)));
      const next = el('button', 'tea-lin-next', '›');
      next.disabled = page.offset + page.limit >= page.total;
      next.addEventListener('click', () => this.go(page.offset + page.limit));
      bar.append(prev, el('span', 'tea-muted', pageText(page)), next);
    }
    return bar;
  }

  private go(offset: number): void {
    this.offset = offset;
    this.refresh();
  }

  private asset(asset: ILineageAsset): HTMLElement {
    const box = el('details', 'tea-lin-asset');
    box.setAttribute('data-name', asset.name);
    box.open = this.openAssets.has(asset.name);
    box.addEventListener('toggle', () => this.remember(this.openAssets, asset.name, box.open));
    const summary = el('summary');
    const current = asset.nodes.find(n => n.current);
    summary.append(el('span', 'tea-sb-name', asset.name));
    if (current) {
      summary.append(el('span', `tea-lin-status tea-lin-${slug(current.status)}`, current.status));
    }
    summary.append(el('span', 'tea-muted', ` ${plural(asset.nodes.length + (asset.older ?? 0), 'version')}`));
    if (asset.unused) {
      summary.append(el('span', 'tea-chip tea-lin-unused', 'promoted, never used since'));
    }
    box.append(summary);
    if (asset.older) {
      box.append(el('div', 'tea-muted', `${plural(asset.older, 'older version')} not shown: ws.lineage(${JSON.stringify(asset.name)})`));
    }
    const tree = el('ul', 'tea-lin-tree');
    for (const row of lineageRows(asset)) {
      tree.append(this.row(asset.name, row));
    }
    box.append(tree);
    return box;
  }

  private row(name: string, row: ILineageRow): HTMLElement {
    const key = `${name}@${row.node.v}`;
    const item = el('li', 'tea-lin-node');
    item.setAttribute('data-node', key);
    item.style.paddingLeft = `${row.depth * 14}px`;
    const d = el('details');
    d.open = this.openNodes.has(key);
    d.addEventListener('toggle', () => {
      this.remember(this.openNodes, key, d.open);
      if (d.open && !this.details.has(key)) {
        this.host.send({ request: 'lineage_node', kind: this.kind, name, version: row.node.v });
      }
    });
    const summary = el('summary');
    summary.append(
      el('code', '', (row.depth ? '└ ' : '') + row.label),
      el('span', `tea-lin-status tea-lin-${slug(row.node.status)}`, row.node.status)
    );
    for (const chip of row.chips) {
      summary.append(el('span', 'tea-chip', chip));
    }
    d.append(summary);
    const detail = this.details.get(key);
    d.append(detail ? this.detail(name, detail) : el('div', 'tea-muted', 'loading…'));
    item.append(d);
    return item;
  }

  private detail(name: string, node: INodeDetail): HTMLElement {
    const box = el('div', 'tea-lin-detail');
    if (!node.gate.length) {
      box.append(el('div', 'tea-muted', 'no gate decision: promotion unmeasured'));
    }
    for (const decision of node.gate) {
      const table = el('table', 'tea-sb-table tea-lin-evidence');
      for (const [k, v] of evidenceRows(decision)) {
        const tr = el('tr');
        tr.append(el('th', '', k), el('td', '', v));
        table.append(tr);
      }
      table.title = decision.message;
      box.append(table);
    }
    box.append(this.runs('made by', node.made_by.map(run => ({ run, text: '' }))));
    const used = node.used_by.map(u => ({ run: u.run, text: runMark(u.status, u.correct) }));
    const more = node.used_total - node.used_by.length;
    box.append(this.runs(`used by (${node.score})`, used, more));
    if (node.status !== 'rolled back') {
      box.append(this.rollback(name, node));
    }
    return box;
  }

  private runs(title: string, runs: { run: string; text: string }[], more = 0): HTMLElement {
    const box = el('div', 'tea-lin-runs');
    box.append(el('span', 'tea-muted', `${title}: `));
    if (!runs.length) {
      box.append(el('span', 'tea-muted', '—'));
    }
    for (const r of runs) {
      const link = el('button', 'tea-lin-run', r.run.slice(0, 12) + (r.text ? ` ${r.text}` : ''));
      link.title = `open the trajectory of ${r.run}${r.text ? ` (${r.text})` : ''}`;
      link.setAttribute('data-lineage-run', r.run);
      link.addEventListener('click', ev => {
        ev.preventDefault();
        this.host.openRun(r.run);
      });
      box.append(link);
    }
    if (more > 0) {
      box.append(el('span', 'tea-muted', ` and ${more} earlier`));
    }
    return box;
  }

  private rollback(name: string, node: INodeDetail): HTMLElement {
    const box = el('div', 'tea-lin-rollback');
    const plan = this.plan;
    if (plan && plan.name === name && plan.version === node.v && plan.kind === this.kind) {
      box.append(el('pre', 'tea-lin-plan', plan.lines.join('\n')));
      const confirm = el('button', 'tea-lin-confirm', 'confirm roll back');
      confirm.addEventListener('click', () =>
        this.host.send({
          request: 'rollback',
          kind: plan.kind,
          name,
          version: node.v,
          confirm: true,
          head_before: plan.head_before
        })
      );
      const cancel = el('button', 'tea-lin-cancel', 'cancel');
      cancel.addEventListener('click', () => {
        this.plan = null;
        this.render();
      });
      box.append(confirm, cancel);
    } else {
      const start = el('button', 'tea-lin-plan-button', 'roll back…');
      start.title = 'show what a rollback of this version (and what derives from it) would change';
      start.addEventListener('click', () =>
        this.host.send({ request: 'rollback', kind: this.kind, name, version: node.v, confirm: false })
      );
      box.append(start);
    }
    return box;
  }

  private remember(set: Set<string>, key: string, open: boolean): void {
    if (open) {
      set.add(key);
    } else {
      set.delete(key);
    }
  }

  readonly node: HTMLDetailsElement;
  private host: ILineageHost;
  private summary: HTMLElement;
  private content: HTMLElement;
  private kind: LineageKind = 'tool';
  private offset = 0;
  private query = '';
  private page: ILineagePage | null = null;
  private details = new Map<string, INodeDetail>();
  private plan: IRollbackPlan | null = null;
  private notice = '';
  private error = '';
  private openAssets = new Set<string>();
  private openNodes = new Set<string>();
}

/** Assets per page the section asks for. */
const PAGE = 50;

function slug(status: string): string {
  return status.replace(/\s+/g, '-');
}
