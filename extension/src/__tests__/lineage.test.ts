/**
 * Unit tests of the sidebar's Evolution section (issue 30): an asset's versions placed as a tree
 * (parent → child), each with its status and facts; the gate's evidence as rows; the page line.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ILineageAsset, evidenceRows, lineageRows, nodeChips, pageText, runMark } from '../lineage';

const vowels: ILineageAsset = {
  name: 'count_vowels',
  nodes: [
    { v: 1, parent: null, status: 'promoted', as: 2, made: 1, used: 6, gate: 'promoted' },
    { v: 3, parent: 1, status: 'rolled back', made: 1, used: 1 },
    { v: 4, parent: 3, status: 'rolled back', made: 1 },
    { v: 5, parent: 1, status: 'candidate', gate: 'candidate', weak: true, current: true }
  ]
};

function outline(asset: ILineageAsset): string[] {
  return lineageRows(asset).map(r => `${'  '.repeat(r.depth)}${r.label} ${r.node.status}`);
}

test('versions are a tree: each under the version it replaced, siblings oldest first', () => {
  assert.deepEqual(outline(vowels), [
    'v1 promoted',
    '  v3 ← v1 rolled back',
    '    v4 ← v3 rolled back',
    '  v5 ← v1 candidate'
  ]);
});

test('a node shows its promoted version, whether current, its runs and the gate', () => {
  const [first, , , last] = lineageRows(vowels);
  assert.deepEqual(first.chips, ['as v2', 'made by 1 run', 'used by 6 runs', 'gate: promoted']);
  assert.deepEqual(last.chips, ['current', 'not used', 'gate: candidate (underpowered)']);
  assert.deepEqual(nodeChips({ v: 2, parent: 1, status: 'unmeasured', made: 2, used: 1 }), [
    'made by 2 runs',
    'used by 1 run'
  ]);
});

test('a parent left out (older versions not sent) makes its child a root; a cycle never loops', () => {
  const cut: ILineageAsset = { name: 't', older: 2, nodes: [{ v: 3, parent: 2, status: 'unmeasured' }] };
  assert.deepEqual(outline(cut), ['v3 ← v2 unmeasured']);
  const cycle: ILineageAsset = {
    name: 't',
    nodes: [
      { v: 1, parent: 2, status: 'registered' },
      { v: 2, parent: 1, status: 'registered' }
    ]
  };
  assert.deepEqual(outline(cycle), ['v1 ← v2 registered', '  v2 ← v1 registered']);
});

test('1,000 assets of three versions each are placed quickly', () => {
  const start = Date.now();
  let rows = 0;
  for (let i = 0; i < 1000; i++) {
    rows += lineageRows({ ...vowels, name: `tool_${i}` }).length;
  }
  assert.equal(rows, 4000);
  assert.ok(Date.now() - start < 200, `took ${Date.now() - start} ms`);
});

test("the gate's evidence: gain, interval, n and power, as rows", () => {
  const rows = evidenceRows({
    id: 'd1',
    status: 'candidate',
    message: '…',
    gain: 0.1667,
    ci: [-0.26, 0.59],
    level: 0.95,
    n: 4,
    epochs: 2,
    underpowered: true,
    min_tasks: 9
  });
  assert.deepEqual(rows, [
    ['decision', 'candidate'],
    ['gain', '+0.17'],
    ['95% interval', '-0.26 to +0.59'],
    ['n', '4 held-out tasks × 2 epochs'],
    ['underpowered', 'yes: about 9 tasks needed']
  ]);
  const promoted = evidenceRows({
    id: 'd2',
    status: 'promoted',
    message: '',
    gain: 0.83,
    ci: [0.4, 1.26],
    level: 0.9,
    n: 6,
    epochs: 1,
    underpowered: false,
    min_tasks: 3,
    recheck_of: 'd1'
  });
  assert.deepEqual(promoted[0], ['decision', 'promoted (re-check of d1)']);
  assert.deepEqual(promoted[2], ['90% interval', '+0.40 to +1.26 (excludes 0)']);
  assert.deepEqual(promoted[3], ['n', '6 held-out tasks × 1 epoch']);
});

test('the page line counts the assets shown of all', () => {
  assert.equal(pageText({ offset: 50, total: 1000, assets: new Array(50) }), '51–100 of 1,000');
  assert.equal(pageText({ offset: 0, total: 0, assets: [] }), 'none');
});

test('a run that used a version is marked by how it ended', () => {
  assert.deepEqual(
    [runMark('success', true), runMark('success', false), runMark('success', null), runMark('failure', null)],
    ['✓', '✗', '', 'failure']
  );
});
