/**
 * Unit tests of a fork's comparison with its original in the renderer: the payload's `divergence`
 * checked (model.ts), the line the view says ("departs from RUN at step 4: different model input",
 * "reproduces RUN so far", "reproduced RUN"), a live partial update that leaves it out keeping it
 * (live.ts), and the replay choice in the Fork line and the fork cell request (forks.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { departureText, forkCellRequest, forkLine } from '../forks';
import { mergeTrajectory } from '../live';
import { parseDivergence, parsePayload } from '../model';

const DEPARTED = {
  source: 'r0',
  unit: 'step',
  step: 4,
  how: 'model input',
  original: 'a prompt of 900 chars, sha256 0123456789ab',
  replay: 'a prompt of 912 chars, sha256 ba9876543210'
};

test('a departure reads as where and how', () => {
  const d = parseDivergence(DEPARTED)!;
  assert.equal(departureText(d, false), 'departs from r0 at step 4: different model input');
  assert.equal(departureText(d, true), 'departs from r0 at step 4: different model input');
  const message = parseDivergence({ ...DEPARTED, unit: 'message', step: 5, how: 'message' })!;
  assert.equal(departureText(message, false), 'departs from r0 at message 5: different message');
  const unknown = parseDivergence({ ...DEPARTED, how: 'colour' })!;
  assert.equal(departureText(unknown, false), 'departs from r0 at step 4: colour'); // a newer kernel's word
});

test('a fork that has not departed reproduces its original, so far while it runs', () => {
  const d = parseDivergence({ source: 'r0', unit: 'step' })!;
  assert.equal(d.step, undefined);
  assert.equal(departureText(d, true), 'reproduces r0 so far');
  assert.equal(departureText(d, false), 'reproduced r0');
});

test('no divergence, or a malformed one, says nothing', () => {
  for (const bad of [undefined, null, 'r0', [], {}, { source: '' }, { source: 3 }]) {
    assert.equal(parseDivergence(bad), null, JSON.stringify(bad));
  }
  const parsed = parsePayload({ agent: 'a', steps: [] });
  assert.ok(parsed.ok && parsed.traj.divergence === null);
});

test('a partial live update keeps the divergence it does not carry, and replaces it when it does', () => {
  const base = parsePayload({ agent: 'a', steps: [], live: true, divergence: { source: 'r0', unit: 'step' } });
  assert.ok(base.ok);
  const quiet = { agent: 'a', steps: [], partial: true, status: 'running' };
  const q = parsePayload(quiet);
  assert.ok(q.ok);
  mergeTrajectory(base.traj, q.traj, quiet);
  assert.deepEqual(base.traj.divergence, { source: 'r0', unit: 'step' });
  const said = { agent: 'a', steps: [], partial: true, status: 'running', divergence: DEPARTED };
  const s = parsePayload(said);
  assert.ok(s.ok);
  mergeTrajectory(base.traj, s.traj, said);
  assert.equal(base.traj.divergence?.step, 4);
  assert.equal(base.traj.divergence?.how, 'model input');
});

test('the replay choice goes into the Fork line and the fork cell request', () => {
  assert.equal(forkLine('r1', { step: 3 }), '%tea fork r1 --step 3');
  assert.equal(forkLine('r1', { step: 3 }, false, 'live'), '%tea fork r1 --step 3');
  assert.equal(forkLine('r1', { step: 3 }, false, 'recorded'), '%tea fork r1 --step 3 --replay recorded');
  const target = { kind: 'observation', label: 'the observation of action 1 (work)', value: 'x', format: 'text' as const, action: 1 };
  assert.equal(forkCellRequest('r1', { step: 3 }, target, 'y', 'recorded').replay, 'recorded');
  assert.ok(!('replay' in forkCellRequest('r1', { step: 3 }, target, 'y'))); // a fork that takes none
});
