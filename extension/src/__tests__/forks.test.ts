/**
 * Unit tests of time travel in the renderer (forks.ts): where Fork buttons go and the lines they put
 * in cells, a fork's edit in words, and the kernel's context reply checked.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  contextLine,
  contextShares,
  editSummary,
  editValue,
  forkLine,
  lineageText,
  messageForkRun,
  messageNumber,
  parseContextReply,
  parseEdit,
  runIdAt,
  stageForkRun,
  stepForkRun
} from '../forks';
import { ITrajectory, parsePayload } from '../model';

function traj(extra: Record<string, unknown> = {}, children: unknown[] = []): ITrajectory {
  const parsed = parsePayload({
    version: 1,
    agent: 'boss',
    task: 't',
    model: 'm',
    status: 'success',
    steps: [{ number: 1, actions: [] }],
    children,
    forkable: 'steps',
    ...extra
  });
  assert.ok(parsed.ok);
  return (parsed as { traj: ITrajectory }).traj;
}

const child = (forkable: string, status = 'success') => ({
  agent: 'helper',
  status,
  steps: [{ number: 1, actions: [] }],
  forkable
});

const meta = { run_id: 'root-1', runs: { id: 'root-1', children: [{ id: 'sub-1', children: [] }, { id: 'sub-2' }] } };

test('a sub-agent step forks its own run, named by the metadata tree', () => {
  const t = traj({}, [child('steps'), child('')]);
  assert.equal(runIdAt(meta, []), 'root-1');
  assert.equal(runIdAt(meta, [0]), 'sub-1');
  assert.equal(runIdAt(meta, [5]), null);
  assert.equal(stepForkRun(t, meta, []), 'root-1');
  assert.equal(stepForkRun(t, meta, [0]), 'sub-1');
  assert.equal(stepForkRun(t, meta, [1]), null); // a workflow agent or team member: no fork
  assert.equal(stepForkRun(t, { run_id: 'root-1' }, [0]), null); // an old output without ids
  assert.equal(stepForkRun(traj({ live: true }), meta, []), null); // still running
  assert.equal(stepForkRun(t, { run_id: 'bad id; rm -rf' }, []), null);
});

test('ToolSelf stages and CORAL messages fork the root run', () => {
  const toolself = traj({ forkable: 'stages' });
  assert.equal(stepForkRun(toolself, meta, []), null);
  assert.equal(stageForkRun(toolself, meta), 'root-1');
  const coral = traj({
    forkable: 'messages',
    messages: [
      { seq: 3, thread: 'main', sender: 'a', mentions: [], content: 'x' },
      { seq: 7, thread: 'main', sender: 'b', mentions: [], content: 'y' }
    ]
  });
  assert.equal(messageForkRun(coral, meta), 'root-1');
  assert.equal(stageForkRun(coral, meta), null);
  assert.equal(messageNumber(coral, 7), 2);
  assert.equal(messageNumber(coral, 99), 0);
});

test('no Fork on a CORAL message sent in the middle of its sender\'s turn', () => {
  const coral = traj({
    forkable: 'messages',
    messages: [
      { seq: 1, thread: 'main', sender: 'o', mentions: ['w1'], content: 'x', forkable: false },
      { seq: 2, thread: 'main', sender: 'o', mentions: ['w2'], content: 'y' }
    ]
  });
  assert.equal(coral.messages[0].forkable, false);
  assert.equal(messageForkRun(coral, meta, coral.messages[0]), null);
  assert.equal(messageForkRun(coral, meta, coral.messages[1]), 'root-1');
});

test('fork lines', () => {
  assert.equal(forkLine('r1', { step: 3 }), '%tea fork r1 --step 3');
  assert.equal(forkLine('r1', { step: 3 }, true), '%tea fork r1 --step 3 --edit');
  assert.equal(forkLine('r1', { stage: 2 }, true), '%tea fork r1 --stage 2 --edit');
  assert.equal(contextLine('r1', 4), '%tea context r1 --step 4');
  assert.throws(() => forkLine('r1 --model x', { step: 1 }));
});

test('a fork edit reads as words, before and after as text', () => {
  const t = traj({ edit: { kind: 'observation', step: 3, action: 1, tool: 'work', before: 'old', after: 'new' } });
  const edit = parseEdit(t.edit)!;
  assert.equal(editSummary(edit), 'edited: the observation of action 1 (work) of step 3');
  assert.equal(editSummary(parseEdit({ kind: 'stage', stage: 2 })!), 'edited: the configuration of stage 2');
  assert.equal(editSummary(parseEdit({ kind: 'sub_agent', agent: 'helper', sub_step: 1 })!), 'helper forked at its step 1');
  assert.equal(
    editSummary(parseEdit({ kind: 'observation', action: 1, step: 2, agent: 'helper' })!),
    "edited: the observation of action 1 of step 2 in helper's run"
  );
  assert.equal(parseEdit(null), null);
  assert.equal(parseEdit({ kind: 5 }), null);
  assert.equal(editValue([{ name: 'work', arguments: { n: 2 } }]), 'work({"n":2})');
  assert.equal(editValue({ sub_goal: 'x' }), '{"sub_goal":"x"}');
  const step = traj({ steps: [{ number: 1, actions: [], edited: { kind: 'actions' }, note: 'actions edited' }] }).steps[0];
  assert.equal(step.note, 'actions edited');
  assert.equal(parseEdit(step.edited)!.kind, 'actions');
});

test('a context reply is checked, errors say why', () => {
  const reply = {
    type: 'context',
    context: {
      run_id: 'r',
      step: 3,
      stage: '',
      chars: 100,
      sizes: { history: 60, task: 40 },
      previous_step: 2,
      clipped: false,
      parts: [
        { message: 1, role: 'user', kind: 'task', chars: 40, changed: false, text: '<task>x' },
        { message: 1, role: 'user', kind: 'history', chars: 60, changed: true, text: '<step_2>', clipped: true }
      ],
      removed: [{ kind: 'history', chars: 3, text: 'history: <step_1>' }],
      tools: ['work', 'done']
    }
  };
  const parsed = parseContextReply(reply);
  assert.ok(parsed.ok);
  const c = (parsed as { context: import('../forks').IStepContext }).context;
  assert.equal(c.parts.length, 2);
  assert.ok(c.parts[1].changed && c.parts[1].clipped);
  assert.deepEqual(contextShares(c).map(s => s.kind), ['history', 'task']);
  assert.deepEqual(parseContextReply({ type: 'error', message: 'no model request at step 9' }), {
    ok: false,
    error: 'no model request at step 9'
  });
  assert.equal(parseContextReply({ type: 'state' }).ok, false);
});

test('the header says how a run came from another', () => {
  assert.equal(lineageText('r1', { resumed: true, fork_point: 'after step 4' }, 4), 'resumed from r1 after step 4');
  assert.equal(lineageText('r1', { resumed: true }, 4), 'resumed from r1 after step 4');
  assert.equal(lineageText('r1', { fork_point: 'at stage 2' }, 3), 'forked from r1 at stage 2');
  assert.equal(lineageText('r1', { fork_point: "at stocktaker's step 2" }, 1), "forked from r1 at stocktaker's step 2");
  assert.equal(lineageText('r1', {}, 3), 'forked from r1 at step 3');
  assert.equal(lineageText('r1', {}, null), 'forked from r1');
});
