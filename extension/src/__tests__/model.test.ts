/**
 * Unit tests of the renderer's logic (node's test runner): payload validation, the rows of each
 * view, filters and search, the virtual list maths, the chart and the highlighter.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  ITrajectory,
  NO_FILTER,
  agentsOf,
  chartBars,
  codeOf,
  forkCommand,
  highlightPython,
  offsets,
  parsePayload,
  rowAt,
  stageRows,
  stepForkable,
  stepRows,
  stepTimes,
  stepsLabel,
  threadRows,
  toolsOf,
  viewsOf,
  visibleRange,
  workOf
} from '../model';

function step(n: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    number: n,
    thinking: `think ${n}`,
    evaluation: '',
    memory: '',
    next_goal: `goal ${n}`,
    replayed: false,
    errors: [],
    prompt_tokens: 10 * n,
    completion_tokens: n,
    cost: 0.001 * n,
    actions: [{ name: 'search', arguments: { q: `q${n}` }, ok: true, observation: `obs ${n}` }],
    ...extra
  };
}

function run(agent: string, steps: unknown[], children: unknown[] = [], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    version: 1,
    agent,
    task: `task of ${agent}`,
    model: 'tea/test',
    status: 'success',
    answer: '',
    prompt_tokens: 0,
    completion_tokens: 0,
    cost: 0,
    steps,
    stages: [],
    threads: [],
    messages: [],
    children,
    ...extra
  };
}

function parsed(data: unknown): ITrajectory {
  const r = parsePayload(data);
  assert.ok(r.ok, r.ok ? '' : r.error);
  return (r as { traj: ITrajectory }).traj;
}

const tree = run(
  'planner',
  [step(1), step(2, { actions: [{ name: 'researcher_agent', arguments: {}, ok: false, observation: 'failed' }] })],
  [run('researcher', [step(1), step(2)], [run('browser', [step(1)])]), run('analyst', [step(1)])]
);

test('a valid payload parses; missing fields get defaults', () => {
  const t = parsed(tree);
  assert.equal(t.agent, 'planner');
  assert.equal(t.children[0].children[0].agent, 'browser');
  const minimal = parsed({ agent: 'a', steps: [{ number: 1 }] });
  assert.deepEqual(minimal.steps[0].actions, []);
  assert.equal(minimal.status, 'unknown');
  assert.equal(minimal.live, false);
  assert.equal(minimal.tokens_estimated, false);
  assert.equal(parsed({ agent: 'a', steps: [], tokens_estimated: true }).tokens_estimated, true);
  assert.equal(parsed({ agent: 'a', steps: [], tokens_estimated: 'yes' }).tokens_estimated, false);
});

test('a malformed payload is an error that says where, with the raw JSON', () => {
  for (const bad of [null, 'text', 42, [], { agent: 'a' }, { agent: 'a', steps: [{}] }, { agent: 'a', steps: [], children: [{ steps: [] }] }]) {
    const r = parsePayload(bad);
    assert.equal(r.ok, false, JSON.stringify(bad));
  }
  const r = parsePayload({ agent: 'a', steps: 'nope' });
  assert.ok(!r.ok && r.error.includes('payload.steps') && r.raw.includes('"nope"'));
});

test('script in any field stays a string (the view puts it in text nodes)', () => {
  const evil = '<img src=x onerror=alert(1)><script>alert(2)</script>';
  const t = parsed(run(evil, [step(1, { thinking: evil, actions: [{ name: evil, arguments: { x: evil }, observation: evil }] })]));
  assert.equal(t.agent, evil);
  assert.equal(t.steps[0].actions[0].observation, evil);
});

test('latency from the metadata is attached to the steps of each run', () => {
  const r = parsePayload(tree, { latency: { steps: [0.5, 1.25], children: [{ steps: [0.1] }] } });
  assert.ok(r.ok);
  const t = (r as { traj: ITrajectory }).traj;
  assert.equal(t.steps[1].latency, 1.25);
  assert.equal(t.children[0].steps[0].latency, 0.1);
  assert.equal(t.children[0].steps[1].latency, undefined);
});

test('the steps view nests sub-agent runs as a tree', () => {
  const rows = stepRows(parsed(tree));
  const shape = rows.map(r => `${r.depth}:${r.kind}:${r.kind === 'step' ? `${r.agent}#${r.step.number}` : r.kind === 'run' ? r.traj.agent : ''}`);
  assert.deepEqual(shape, [
    '0:step:planner#1',
    '0:step:planner#2',
    '0:run:researcher',
    '1:step:researcher#1',
    '1:step:researcher#2',
    '1:run:browser',
    '2:step:browser#1',
    '0:run:analyst',
    '1:step:analyst#1'
  ]);
  // keys are unique and stable (expanded cards survive live updates)
  assert.equal(new Set(rows.map(r => r.key)).size, rows.length);
  // a folded sub-agent hides its steps and its own sub-agents
  const folded = stepRows(parsed(tree), NO_FILTER, new Set(['run:0']));
  assert.deepEqual(folded.map(r => r.key), ['step:root:1', 'step:root:2', 'run:0', 'run:1', 'step:1:1']);
});

test('filters: by agent, tool, status; search across every field', () => {
  const t = parsed(tree);
  const byAgent = stepRows(t, { ...NO_FILTER, agent: 'browser' });
  assert.deepEqual(byAgent.map(r => r.key), ['run:0', 'run:0.0', 'step:0.0:1']);
  const failed = stepRows(t, { ...NO_FILTER, status: 'error' });
  assert.deepEqual(failed.filter(r => r.kind === 'step').map(r => r.key), ['step:root:2']);
  const byTool = stepRows(t, { ...NO_FILTER, tool: 'researcher_agent' });
  assert.deepEqual(byTool.map(r => r.key), ['step:root:2']);
  const found = stepRows(t, { ...NO_FILTER, query: 'Q2' }); // arguments, case-insensitive
  assert.deepEqual(found.filter(r => r.kind === 'step').map(r => r.key), ['step:0:2']);
  assert.equal(stepRows(t, { ...NO_FILTER, query: 'OBS 1' }).filter(r => r.kind === 'step').length, 4);
  assert.deepEqual(stepRows(t, { ...NO_FILTER, query: 'nothing like this' }), []);
  assert.deepEqual(agentsOf(t), ['planner', 'researcher', 'browser', 'analyst']);
  assert.deepEqual(toolsOf(t), ['researcher_agent', 'search']);
});

test('the stages view groups steps under each ToolSelf stage', () => {
  const stages = [
    { index: 1, first_step: 1, sub_goal: 'find', strategy: '', toolbox: ['search'], knowledge: '', reason: 'start', note: '' },
    { index: 2, first_step: 3, sub_goal: 'write', strategy: 's', toolbox: ['python'], knowledge: 'ALL', reason: 'r', note: '' }
  ];
  const t = parsed(run('toolself', [step(1), step(2), step(3)], [], { stages }));
  assert.deepEqual(viewsOf(t), ['stages', 'steps']);
  const rows = stageRows(t);
  assert.deepEqual(rows.map(r => r.key), ['stage:1', 'step:root:1', 'step:root:2', 'stage:2', 'step:root:3']);
  assert.deepEqual(stageRows(t, NO_FILTER, new Set(['stage:1'])).map(r => r.key), ['stage:1', 'stage:2', 'step:root:3']);
});

test('the threads view is a transcript per thread, tool calls resolved under messages', () => {
  const t = parsed(
    run('orchestrator', [], [run('worker', [step(1), step(2)])], {
      threads: [{ id: 't1', name: 'main', participants: ['orchestrator', 'worker'], status: 'open', summary: '' }],
      messages: [
        { seq: 2, thread: 't1', sender: 'worker', mentions: ['orchestrator'], content: 'done it', work: [[0, 1, 0], [0, 2, 0], [5, 1, 0]] },
        { seq: 1, thread: 't1', sender: 'orchestrator', mentions: ['worker'], content: 'please do it' },
        { seq: 3, thread: 't9', sender: 'worker', mentions: [], content: 'side thread' }
      ]
    })
  );
  assert.deepEqual(viewsOf(t), ['threads', 'steps']);
  const rows = threadRows(t);
  assert.deepEqual(rows.map(r => r.key), ['thread:t1', 'msg:1', 'msg:2', 'thread:t9', 'msg:3']);
  const msg = rows[2];
  assert.ok(msg.kind === 'message');
  const work = workOf(t, (msg as { message: ITrajectory['messages'][0] }).message);
  assert.deepEqual(work.map(w => `${w.agent}#${w.step}:${w.action.name}`), ['worker#1:search', 'worker#2:search']);
  assert.deepEqual(threadRows(t, { ...NO_FILTER, agent: 'orchestrator' }).map(r => r.key), ['thread:t1', 'msg:1']);
});

test('virtual list maths: offsets, row at a position, visible range with overscan', () => {
  const offs = offsets([10, 20, 30, 40]);
  assert.deepEqual(offs, [0, 10, 30, 60, 100]);
  assert.equal(rowAt(offs, 0), 0);
  assert.equal(rowAt(offs, 9.9), 0);
  assert.equal(rowAt(offs, 10), 1);
  assert.equal(rowAt(offs, 99), 3);
  assert.equal(rowAt(offs, 500), 3);
  assert.deepEqual(visibleRange(offs, 30, 20, 0), [2, 3]);
  assert.deepEqual(visibleRange(offs, 30, 20, 1), [1, 4]);
  assert.deepEqual(visibleRange([0], 0, 100), [0, 0]);
  // 2,000 rows: the range is small wherever we are
  const big = offsets(new Array(2000).fill(30));
  const [a, b] = visibleRange(big, 30000, 560);
  assert.ok(b - a < 30 && a > 990 && b < 1030, `${a} ${b}`);
});

test('chart bars scale to the box, zero stays empty, the largest fills it', () => {
  const bars = chartBars([0, 5, 10], 30, 20);
  assert.equal(bars.length, 3);
  assert.equal(bars[0].h, 0);
  assert.equal(bars[2].h, 20);
  assert.equal(bars[1].h, 10);
  assert.equal(bars[2].x, 20);
  assert.deepEqual(chartBars([], 10, 10), []);
});

test('generated code is found in arguments and highlighted as tokens', () => {
  const code = 'def add(a, b):\n    # sum\n    return a + 1  # "x"\n';
  assert.equal(codeOf({ name: 'create_tool', arguments: { code } }), code);
  assert.equal(codeOf({ name: 'create_tool', arguments: JSON.stringify({ source: code }) }), code);
  assert.equal(codeOf({ name: 'search', arguments: { q: 'x' } }), null);
  const toks = highlightPython(code);
  assert.equal(toks.map(t => t.text).join(''), code); // lossless
  const cls = (text: string) => toks.find(t => t.text === text)?.cls;
  assert.equal(cls('def'), 'kw');
  assert.equal(cls('add'), 'def');
  assert.equal(cls('return'), 'kw');
  assert.equal(cls('1'), 'num');
  assert.equal(cls('# sum'), 'com');
});

test('Fork buttons only on the steps of a finished run that says its steps fork', () => {
  assert.equal(stepForkable(parsed(run('agent', [step(1)], [], { forkable: 'steps' })), []), true);
  assert.equal(stepForkable(parsed(run('agent', [step(1)], [], { forkable: 'steps' })), [0]), false);
  assert.equal(stepForkable(parsed(run('agent', [step(1)], [], { forkable: 'steps', live: true })), []), false);
  assert.equal(stepForkable(parsed(run('toolself', [step(1)], [], { forkable: '' })), []), false);
  assert.equal(stepForkable(parsed(run('coral', [step(1)], [], { forkable: 'messages' })), []), false);
  assert.equal(stepForkable(parsed(run('older', [step(1)])), []), false);
});

test('the fork command only takes run ids', () => {
  assert.equal(forkCommand('abc123', 4), '%tea fork abc123 --step 4');
  assert.throws(() => forkCommand('x; import os', 1));
});

test('tool time from the metadata is attached beside the model time, and shown apart', () => {
  const r = parsePayload(tree, { latency: { steps: [0.5, 1.25], tools: [2, 0], children: [{ steps: [0.1] }] } });
  assert.ok(r.ok);
  const t = r.traj;
  assert.equal(t.steps[0].tool_time, 2);
  assert.deepEqual(stepTimes(t.steps[0]), ['model 0.50 s', 'tools 2.00 s']);
  assert.deepEqual(stepTimes(t.steps[1]), ['model 1.25 s']);
  assert.equal(t.children[0].steps[0].tool_time, undefined);
});

test('the header counts a team by its members, not as 0 steps', () => {
  assert.equal(stepsLabel(3, 3), '3 steps');
  assert.equal(stepsLabel(2, 7), '2 steps (7 with sub-agents)');
  assert.equal(stepsLabel(0, 12), '12 steps (by sub-agents)');
});
