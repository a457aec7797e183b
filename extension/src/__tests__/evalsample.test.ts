/**
 * Unit tests of a scored sample in a trajectory's header (evalsample.ts): the payload's
 * `evaluation` parsed, and the words the header shows for it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parseEvaluation, sampleLines } from '../evalsample';
import { parsePayload } from '../model';

const WRONG = {
  name: 'sums',
  task_id: 't2',
  epoch: 1,
  verdict: 'wrong',
  scores: { correct: 0, 'tool_called:lookup': 1 },
  target: '3',
  answer: '4',
  scorer: 'gaia',
  note: '',
  error: ''
};

test('a payload with a scored sample keeps it; one without has none', () => {
  const base = { version: 1, agent: 'a', task: 'q', model: 'm', status: 'success', answer: '4', steps: [] };
  const scored = parsePayload({ ...base, evaluation: WRONG });
  assert.ok(scored.ok);
  assert.equal(scored.ok && scored.traj.status, 'success');
  assert.deepEqual(scored.ok && scored.traj.evaluation, WRONG);
  const plain = parsePayload(base);
  assert.equal(plain.ok && plain.traj.evaluation, null);
});

test('the header says the verdict, who scored, the target, the answer and the scores', () => {
  const lines = sampleLines(parseEvaluation(WRONG)!);
  assert.equal(lines.verdict, '✗ wrong');
  assert.equal(lines.scored, 'scored by gaia · evaluation sums, task t2');
  assert.deepEqual(lines.details, ['target: 3', 'scored answer: 4', 'scores: correct 0, tool_called:lookup 1']);
  const later = sampleLines(parseEvaluation({ ...WRONG, epoch: 3, verdict: 'error', scores: {}, error: 'timeout' })!);
  assert.equal(later.verdict, '! error');
  assert.ok(later.scored.endsWith('task t2 (epoch 3)'));
  assert.deepEqual(later.details.slice(2), ['error: timeout']);
});

test('a malformed evaluation is read leniently, never trusted', () => {
  assert.equal(parseEvaluation('wrong'), null);
  assert.equal(parseEvaluation([1]), null);
  const odd = parseEvaluation({ verdict: 'great', scores: { correct: 'yes', x: 0.5 }, epoch: -2 })!;
  assert.equal(odd.verdict, 'not scored');
  assert.deepEqual(odd.scores, { x: 0.5 });
  assert.equal(odd.epoch, 1);
});
