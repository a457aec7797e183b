/**
 * Unit tests of "edit and fork" in the renderer (forks.ts): the kernel's `edit_targets` reply
 * checked, each value as the text a person edits, what they typed read back (JSON errors said), the
 * `fork_cell` request and reply; and a context part's readable summary.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { editedValue, forkCellRequest, parseContextReply, parseEditTargets, parseForkCell, targetText } from '../forks';

const REPLY = {
  type: 'edit_targets',
  run: 'r1',
  step: 3,
  targets: [
    { kind: 'observation', action: 1, label: 'the observation of action 1 (work)', value: 'result 3', format: 'text' },
    { kind: 'actions', label: 'the actions', value: [{ name: 'work', arguments: { n: 3 } }], format: 'json' }
  ]
};

test('the targets a step offers: each observation and the actions', () => {
  const parsed = parseEditTargets(REPLY);
  assert.ok(parsed.ok);
  const [obs, actions] = parsed.targets;
  assert.deepEqual([obs.kind, obs.action, obs.format], ['observation', 1, 'text']);
  assert.deepEqual([actions.kind, actions.action, actions.format], ['actions', undefined, 'json']);
});

test('an error reply, or no targets, is an error that says why', () => {
  assert.deepEqual(parseEditTargets({ type: 'error', message: 'step 2 made no tool call' }), {
    ok: false,
    error: 'step 2 made no tool call'
  });
  assert.equal(parseEditTargets({ type: 'edit_targets', targets: [] }).ok, false);
  assert.equal(parseEditTargets(null).ok, false);
});

test('a value is edited as text, a structure as indented JSON read back on Fork', () => {
  const parsed = parseEditTargets(REPLY);
  assert.ok(parsed.ok);
  const [obs, actions] = parsed.targets;
  assert.equal(targetText(obs), 'result 3');
  assert.equal(targetText(actions), '[\n  {\n    "name": "work",\n    "arguments": {\n      "n": 3\n    }\n  }\n]');
  assert.deepEqual(editedValue(obs, 'EDITED\nthree'), { ok: true, value: 'EDITED\nthree' });
  assert.deepEqual(editedValue(actions, '[{"name": "work", "arguments": {"n": 9}}]'), {
    ok: true,
    value: [{ name: 'work', arguments: { n: 9 } }]
  });
  const bad = editedValue(actions, '[{"name": "work",}]');
  assert.equal(bad.ok, false);
  assert.match((bad as { error: string }).error, /^the actions is edited as JSON: /);
});

test('the fork_cell request names the run, where, what and the value; a stage field by name', () => {
  const parsed = parseEditTargets(REPLY);
  assert.ok(parsed.ok);
  assert.deepEqual(forkCellRequest('r1', { step: 3 }, parsed.targets[0], 'new'), {
    request: 'fork_cell',
    run: 'r1',
    step: 3,
    kind: 'observation',
    action: 1,
    value: 'new'
  });
  const stage = { kind: 'stage', field: 'strategy', label: 'the strategy', value: 'x', format: 'text' as const };
  assert.deepEqual(forkCellRequest('r1', { stage: 2 }, stage, 'y'), {
    request: 'fork_cell',
    run: 'r1',
    stage: 2,
    kind: 'stage',
    field: 'strategy',
    value: 'y'
  });
  assert.throws(() => forkCellRequest('r1; rm', { step: 1 }, stage, 'y'), /not a run id/);
});

test('the fork_cell reply: the code, or the kernel refusal', () => {
  const code = 'await ws.fork(...)';
  assert.deepEqual(parseForkCell({ type: 'fork_cell', code }), { ok: true, code });
  assert.deepEqual(parseForkCell({ type: 'error', message: 'action 1 needs a "name"' }), {
    ok: false,
    error: 'action 1 needs a "name"'
  });
  assert.equal(parseForkCell({ type: 'fork_cell' }).ok, false);
});

test('a context part keeps the summary the kernel wrote', () => {
  const parsed = parseContextReply({
    type: 'context',
    context: {
      parts: [
        {
          kind: 'history',
          role: 'user',
          text: '\n<agent_history>\n<step_1>\n[work] -> result 1',
          summary: 'step 1: [work] -> result 1'
        },
        { kind: 'task', role: 'user', text: '<task>t</task>' }
      ]
    }
  });
  assert.ok(parsed.ok);
  assert.equal(parsed.context.parts[0].summary, 'step 1: [work] -> result 1');
  assert.equal(parsed.context.parts[1].summary, undefined);
});
