/**
 * Unit tests of the live view's in-progress card and stop reason (issue 28): a call that has not
 * returned carries `running_for` and the view counts on from it; a tick that sends no step keeps the
 * count; the call's result ends it; an interrupted run's reason merges like any header field; a
 * notebook saved mid-run keeps how long the call had run, not this page's clock.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LiveState, forgetLiveRuns, wholePayload } from '../live';
import { ITrajectory, parsePayload, resumeCommand, runningCalls, runningText } from '../model';

function step(n: number, actions: Record<string, unknown>[]): Record<string, unknown> {
  return { number: n, thinking: '', errors: [], prompt_tokens: 1, completion_tokens: 0, cost: 0, actions };
}

function run(steps: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { version: 1, agent: 'slowpoke', task: 'be slow', model: 'tea/test', status: 'running', steps, live: true, ...extra };
}

function traj(r: ReturnType<LiveState['apply']>): ITrajectory {
  assert.ok(r.ok, r.ok ? '' : r.error);
  return (r as { traj: ITrajectory }).traj;
}

test('a call that has not returned shows as running, counted on from running_for', () => {
  const parsed = parsePayload(
    run([step(1, [{ name: 'very_slow', arguments: {}, ok: null, observation: '…', running_for: 3.2 }])])
  );
  assert.ok(parsed.ok);
  const t = (parsed as { traj: ITrajectory }).traj;
  const calls = runningCalls(t, Date.now());
  assert.equal(calls.length, 1);
  assert.equal(runningText(calls[0]), 'step 1: very_slow running 3 s…');
  const later = runningCalls(t, Date.now() + 2000);
  assert.equal(runningText(later[0]), 'step 1: very_slow running 5 s…');
  // a run that is not live runs nothing; nor does a call that returned
  assert.deepEqual(runningCalls({ ...t, live: false }, Date.now()), []);
  const returned = parsePayload(run([step(1, [{ name: 'very_slow', ok: true, observation: 'done', running_for: 1 }])]));
  assert.deepEqual(runningCalls((returned as { traj: ITrajectory }).traj, Date.now()), []);
});

test("a sub-agent's running call names it; a sub-run that ended runs nothing", () => {
  const child = { ...run([step(2, [{ name: 'fetch', ok: null, running_for: 1 }])]), agent: 'helper' };
  const ended = { ...run([step(1, [{ name: 'stuck', ok: null, running_for: 9 }])]), agent: 'old', status: 'success' };
  const parsed = parsePayload(run([], { children: [child, ended] }));
  const calls = runningCalls((parsed as { traj: ITrajectory }).traj, Date.now());
  assert.deepEqual(calls.map(runningText), ["helper's step 2: fetch running 1 s…"]);
});

test('ticks without steps keep the running call; its result ends it; the stop reason merges', () => {
  forgetLiveRuns();
  const live = new LiveState();
  const meta = (seq: number, base?: number) => ({ run_id: 'r1', seq, ...(base ? { base } : {}) });
  let t = traj(live.apply(run([step(1, [{ name: 'very_slow', ok: null, observation: '…', running_for: 0.5 }])]), meta(1)));
  assert.equal(runningCalls(t, Date.now()).length, 1);
  t = traj(live.apply({ version: 1, agent: 'slowpoke', status: 'running', partial: true, live: true, steps: [] }, meta(2, 1)));
  assert.equal(runningCalls(t, Date.now()).length, 1); // a tick: nothing resent, still running
  t = traj(
    live.apply(
      {
        version: 1,
        agent: 'slowpoke',
        status: 'interrupted',
        partial: true,
        live: false,
        stop_reason: 'interrupted: the kernel restarted',
        steps: [step(1, [{ name: 'very_slow', ok: true, observation: 'slept' }])]
      },
      meta(3, 2)
    )
  );
  assert.deepEqual(runningCalls(t, Date.now()), []);
  assert.equal(t.stop_reason, 'interrupted: the kernel restarted');
  assert.equal(t.status, 'interrupted');
  assert.equal(resumeCommand('r1'), '%tea resume r1');
});

test('a notebook saved mid-run keeps how long a call had run, not the page clock', () => {
  forgetLiveRuns();
  const live = new LiveState();
  const t = traj(live.apply(run([step(1, [{ name: 'very_slow', ok: null, observation: '…', running_for: 4 }])]), { run_id: 'r2', seq: 1 }));
  const saved = wholePayload(t).data as { steps: { actions: Record<string, unknown>[] }[] };
  const action = saved.steps[0].actions[0];
  assert.equal(action.running_since, undefined);
  assert.ok(typeof action.running_for === 'number' && action.running_for >= 4 && action.running_for < 5);
});
