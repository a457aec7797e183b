/**
 * Unit tests of live updates that carry only what changed (live.ts): merging partial payloads into
 * the whole one, a sub-run arriving mid-run, a renderer that starts mid-run, and the whole payload a
 * saved notebook gets back.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LiveState, forgetLiveRuns, wholePayload } from '../live';
import { ITrajectory } from '../model';

function step(n: number, obs = `obs ${n}`): Record<string, unknown> {
  return {
    number: n,
    thinking: '',
    evaluation: '',
    memory: '',
    next_goal: '',
    replayed: false,
    errors: [],
    prompt_tokens: 10,
    completion_tokens: 0,
    cost: 0,
    actions: [{ name: 'lookup', arguments: { k: n }, ok: true, observation: obs }]
  };
}

function whole(steps: unknown[], children: unknown[] = [], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    version: 1,
    agent: 'planner',
    task: 'a long task',
    model: 'tea/test',
    status: 'running',
    answer: '',
    prompt_tokens: 0,
    completion_tokens: 0,
    cost: 0,
    steps,
    stages: [],
    threads: [],
    messages: [],
    children,
    live: true,
    ...extra
  };
}

function partial(steps: unknown[], children: unknown[] = [], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { version: 1, agent: 'planner', status: 'running', partial: true, live: true, steps, children, ...extra };
}

function traj(r: ReturnType<LiveState['apply']>): ITrajectory {
  assert.ok(r.ok, r.ok ? '' : r.error);
  return (r as { traj: ITrajectory }).traj;
}

test('partial updates merge into the whole payload: steps by number, sub-runs by index', () => {
  forgetLiveRuns();
  const live = new LiveState();
  let t = traj(live.apply(whole([step(1, '…')]), { run_id: 'r1', seq: 1, latency: { steps: [0.5] } }));
  assert.equal(t.steps.length, 1);
  // step 1 went on (its observation came) and step 2 began; a sub-run started
  t = traj(
    live.apply(
      partial([step(1), step(2)], [{ ...partial([step(1)]), agent: 'helper', task: 'help', index: 0 }], { cost: 0.5 }),
      { run_id: 'r1', seq: 2, base: 1, latency: { steps: [0.5, 0.25], tools: [0, 0], children: [{ steps: [1] }] } }
    )
  );
  assert.deepEqual(t.steps.map(s => s.number), [1, 2]);
  assert.equal(t.steps[0].actions[0].observation, 'obs 1');
  assert.equal(t.steps[1].latency, 0.25);
  assert.equal(t.task, 'a long task'); // a partial payload leaves the task out: kept
  assert.equal(t.cost, 0.5);
  assert.equal(t.children.length, 1);
  assert.equal(t.children[0].agent, 'helper');
  assert.equal(t.children[0].steps[0].latency, 1);
  assert.ok(!t.incomplete);
  // the sub-run goes on; the run ends
  t = traj(
    live.apply(partial([], [{ ...partial([step(2)]), agent: 'helper', status: 'success', index: 0 }], { status: 'success', live: false }), {
      run_id: 'r1',
      seq: 3,
      base: 2
    })
  );
  assert.deepEqual(t.children[0].steps.map(s => s.number), [1, 2]);
  assert.equal(t.children[0].status, 'success');
  assert.equal(t.live, false);
  assert.ok(!t.incomplete);
});

test('a step that comes late goes in its place; applying an update twice changes nothing', () => {
  forgetLiveRuns();
  const live = new LiveState();
  live.apply(whole([step(1), step(3)]), { run_id: 'r2', seq: 1 });
  const update = partial([step(2)]);
  let t = traj(live.apply(update, { run_id: 'r2', seq: 2, base: 1 }));
  t = traj(live.apply(update, { run_id: 'r2', seq: 2, base: 1 }));
  assert.deepEqual(t.steps.map(s => s.number), [1, 2, 3]);
});

test('a renderer that starts mid-run shares what the page has; one with nothing says so', () => {
  forgetLiveRuns();
  const first = new LiveState();
  first.apply(whole([step(1)]), { run_id: 'r3', seq: 1 });
  first.apply(partial([step(2)]), { run_id: 'r3', seq: 2, base: 1 });
  const second = new LiveState(); // a new view of the same output
  let t = traj(second.apply(partial([step(2)]), { run_id: 'r3', seq: 2, base: 1 }));
  assert.deepEqual(t.steps.map(s => s.number), [1, 2]);
  t = traj(second.apply(partial([step(3)]), { run_id: 'r3', seq: 3, base: 2 }));
  assert.deepEqual(t.steps.map(s => s.number), [1, 2, 3]);
  assert.ok(!t.incomplete);

  forgetLiveRuns(); // another page: the output restored from a notebook saved mid-run
  const fresh = new LiveState();
  t = traj(fresh.apply(partial([step(7)]), { run_id: 'r3', seq: 7, base: 6 }));
  assert.deepEqual(t.steps.map(s => s.number), [7]);
  assert.equal(t.incomplete, true);
  // a missed update, likewise
  t = traj(fresh.apply(partial([step(9)]), { run_id: 'r3', seq: 9, base: 8 }));
  assert.equal(t.incomplete, true);
  // the whole payload at the end puts everything right
  t = traj(fresh.apply(whole([step(1), step(2)], [], { status: 'success', live: false }), { run_id: 'r3' }));
  assert.deepEqual(t.steps.map(s => s.number), [1, 2]);
  assert.ok(!t.incomplete);
});

test('the merged trajectory becomes a whole payload again, timings back in the metadata', () => {
  forgetLiveRuns();
  const live = new LiveState();
  live.apply(whole([step(1)]), { run_id: 'r4', seq: 1, latency: { steps: [2], tools: [1] } });
  const t = traj(
    live.apply(partial([step(2)], [{ ...partial([step(1)]), agent: 'helper', index: 0 }]), {
      run_id: 'r4',
      seq: 2,
      base: 1,
      latency: { steps: [3], tools: [0], children: [{ steps: [4], tools: [0] }] }
    })
  );
  const { data, latency } = wholePayload(t);
  assert.equal(data.partial, undefined);
  assert.equal(data.task, 'a long task');
  assert.deepEqual(latency, { steps: [2, 3], tools: [1, 0], children: [{ steps: [4], tools: [0], children: [] }] });
  const steps = data.steps as Record<string, unknown>[];
  assert.ok(!('latency' in steps[0]));
  const again = traj(new LiveState().apply(data, { latency }));
  assert.deepEqual(again.steps.map(s => [s.number, s.latency]), [[1, 2], [2, 3]]);
  assert.equal(again.children[0].steps[0].latency, 4);
});
