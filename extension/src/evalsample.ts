/**
 * The payload's `evaluation` (tea_notebook/runtime/sample_score.py): what an evaluation made of a run
 * that was one of its samples. The header shows the scorer's verdict beside the agent's own status,
 * so an agent's "success" with a wrong answer reads as both, not as a success.
 *
 * No imports: model.ts parses with it, view.ts draws with it (the DOM only when called).
 */

/** the scorer's verdicts: right, wrong, an error of the agent's (scored wrong), a provider failure */
export const VERDICTS = ['right', 'wrong', 'error', 'not scored'] as const;
export type Verdict = (typeof VERDICTS)[number];

export interface IEvalSample {
  /** the evaluation's name */
  name: string;
  task_id: string;
  epoch: number;
  verdict: Verdict;
  /** named scores: `correct` and each trajectory check's (none when the provider failed) */
  scores: Record<string, number>;
  target: string;
  /** the answer as it was scored (the final answer taken out of the agent's text) */
  answer: string;
  scorer: string;
  /** what the scorer said (an LLM judge's reply) */
  note: string;
  error: string;
}

const MARK: Record<Verdict, string> = { right: '✓', wrong: '✗', error: '!', 'not scored': '–' };

const text = (v: unknown): string => (v === null || v === undefined ? '' : String(v));

/** The `evaluation` of a payload, or null when it has none (or not an object). */
export function parseEvaluation(v: unknown): IEvalSample | null {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    return null;
  }
  const o = v as Record<string, unknown>;
  const scores: Record<string, number> = {};
  if (o.scores && typeof o.scores === 'object' && !Array.isArray(o.scores)) {
    for (const [k, s] of Object.entries(o.scores as Record<string, unknown>)) {
      if (typeof s === 'number' && isFinite(s)) {
        scores[k] = s;
      }
    }
  }
  const verdict = VERDICTS.includes(o.verdict as Verdict) ? (o.verdict as Verdict) : 'not scored';
  return {
    name: text(o.name),
    task_id: text(o.task_id),
    epoch: typeof o.epoch === 'number' && o.epoch >= 1 ? Math.floor(o.epoch) : 1,
    verdict,
    scores,
    target: text(o.target),
    answer: text(o.answer),
    scorer: text(o.scorer),
    note: text(o.note),
    error: text(o.error)
  };
}

/** The header's words for a sample: the verdict line and the details line (unit-tested). */
export function sampleLines(s: IEvalSample): { verdict: string; scored: string; details: string[] } {
  const epoch = s.epoch > 1 ? ` (epoch ${s.epoch})` : '';
  const details = [`target: ${s.target}`, `scored answer: ${s.answer}`];
  const scores = Object.entries(s.scores).map(([k, v]) => `${k} ${v}`);
  if (scores.length) {
    details.push(`scores: ${scores.join(', ')}`);
  }
  if (s.note) {
    details.push(`scorer said: ${s.note}`);
  }
  if (s.error) {
    details.push(`error: ${s.error}`);
  }
  return {
    verdict: `${MARK[s.verdict]} ${s.verdict}`,
    scored: `scored${s.scorer ? ` by ${s.scorer}` : ''} · evaluation ${s.name}, task ${s.task_id}${epoch}`,
    details
  };
}

/**
 * The sample's header block (verdict badge, who scored it, then target, answer and scores), and the
 * agent's status badge told what it is. Text goes in as text nodes, never parsed as HTML.
 */
export function sampleHeader(s: IEvalSample, statusBadge: HTMLElement): HTMLElement {
  statusBadge.title = "the agent's own status (the run's end), not the score: the scorer's verdict is below";
  const lines = sampleLines(s);
  const box = document.createElement('div');
  box.className = 'tea-sample';
  box.setAttribute('data-tea', 'sample');
  const verdict = document.createElement('span');
  verdict.className = `tea-verdict tea-verdict-${s.verdict.replace(/[^a-z]/g, '')}`;
  verdict.textContent = lines.verdict;
  verdict.title = "the scorer's verdict";
  verdict.setAttribute('data-tea', 'verdict');
  const scored = document.createElement('span');
  scored.className = 'tea-muted';
  scored.textContent = lines.scored;
  const details = document.createElement('div');
  details.className = 'tea-sample-details';
  details.setAttribute('data-tea', 'sample-details');
  details.textContent = lines.details.join(' · ');
  const head = document.createElement('div');
  head.className = 'tea-sample-head';
  head.append(verdict, scored);
  box.append(head, details);
  return box;
}
