/**
 * Unit tests of the agent cells' pure parts (issue 29): the comm messages from the kernel are
 * validated with errors that name what is wrong, the page's replies have the shared design's shapes,
 * the badge reads "agent NAME · run R · step S", an edit's diff is rendered line by line, a changed
 * target is a conflict, and "Fix with agent" inserts `%tea fix CELL_ID` only for a plain cell id.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';

import {
  IProposal,
  badgeText,
  barTitle,
  cellsReply,
  decisionMessage,
  editConflict,
  executedMessage,
  fixCommand,
  insertIndex,
  isCellOf,
  lastOutputIsError,
  lineDiff,
  parseKernelMessage,
  parseTeaMeta,
  proposalDiff,
  ranStatus,
  runLabel,
  sha256Hex,
  shownMessage,
  slimOutputs,
  statusText,
  teaMetaFor
} from '../cellproposals';

const PROPOSAL = {
  id: 'p3',
  run: '0123456789abcdef',
  step: 2,
  kind: 'new',
  agent: 'cleaner',
  cell_id: null,
  after: 'c-agent',
  code: "rows = [r for r in rows if r['price'] is not None]",
  diff: '',
  explanation: 'drop rows without a price',
  mode: 'ask',
  needs_grant: true
};

function proposal(extra: Record<string, unknown> = {}): IProposal {
  const m = parseKernelMessage({ type: 'proposal', proposal: { ...PROPOSAL, ...extra } });
  assert.equal(m.type, 'proposal', JSON.stringify(m));
  return (m as { proposal: IProposal }).proposal;
}

test('a proposal from the kernel is validated and normalised', () => {
  const p = proposal();
  assert.equal(p.id, 'p3');
  assert.equal(p.kind, 'new');
  assert.equal(p.after, 'c-agent');
  assert.equal(p.cell_id, ''); // null → ''
  assert.equal(p.needs_grant, true);
  assert.equal(p.base_hash, '');
  assert.equal(p.decided, false);
  assert.equal(proposal({ after: null }).after, '');
  assert.equal(proposal({ decided: true, base_hash: null }).decided, true); // a pending reply's proposal
});

test('bad messages name what is wrong', () => {
  const bad = (data: unknown) => {
    const m = parseKernelMessage(data);
    assert.equal(m.type, 'invalid');
    return (m as { error: string }).error;
  };
  assert.match(bad('x'), /must be an object/);
  assert.match(bad({ type: 'nonsense' }), /unknown message type "nonsense"/);
  assert.match(bad({ type: 'proposal', proposal: { ...PROPOSAL, id: '' } }), /needs an id/);
  assert.match(bad({ type: 'proposal', proposal: { ...PROPOSAL, kind: 'delete' } }), /unknown kind "delete"/);
  assert.match(bad({ type: 'proposal', proposal: { ...PROPOSAL, kind: 'edit' } }), /p3: a edit proposal needs the target cell_id/);
  assert.match(bad({ type: 'proposal', proposal: { ...PROPOSAL, code: 5 } }), /code must be a string/);
  assert.match(bad({ type: 'pending', proposals: 'p3' }), /proposals must be a list/);
  assert.match(bad({ type: 'pending', proposals: [{ ...PROPOSAL, id: '' }] }), /pending: a proposal needs an id/);
  assert.match(bad({ type: 'settled' }), /no proposal id/);
});

test('the other kernel messages', () => {
  assert.deepEqual(parseKernelMessage({ type: 'cells_request', id: 'r7' }), { type: 'cells_request', id: 'r7' });
  assert.deepEqual(parseKernelMessage({ type: 'settled', proposal: 'p3', status: 'stopped' }), {
    type: 'settled',
    proposal: 'p3',
    status: 'stopped'
  });
  const pending = parseKernelMessage({ type: 'pending', proposals: [PROPOSAL] });
  assert.equal(pending.type, 'pending');
  assert.equal((pending as { proposals: IProposal[] }).proposals[0].id, 'p3');
  assert.deepEqual(parseKernelMessage({ type: 'error', message: 'no run' }), { type: 'error', message: 'no run' });
});

test('the badge and the bar', () => {
  const meta = teaMetaFor(proposal());
  assert.deepEqual(meta, { proposal: 'p3', run: '0123456789abcdef', step: 2, status: 'pending', agent: 'cleaner', kind: 'new' });
  assert.equal(badgeText(meta), 'agent cleaner · run 01234567 · step 2');
  assert.equal(badgeText({ ...meta, run: '', step: 0, agent: '' }), 'agent ?');
  assert.equal(statusText('pending'), 'waiting for you');
  assert.equal(statusText('edited'), 'edited and ran');
  assert.equal(barTitle(proposal()), 'agent cleaner proposes this cell');
  assert.equal(barTitle(proposal({ kind: 'edit', cell_id: 'c1' })), 'agent cleaner proposes an edit of this cell');
  assert.equal(runLabel(proposal()), 'Run (lets this run run cells)');
  assert.equal(runLabel(proposal({ needs_grant: false })), 'Run');
  // metadata read back from a saved notebook
  assert.deepEqual(parseTeaMeta({ proposal: 'p3', run: 'r', step: '4', agent: 'a' }), {
    proposal: 'p3',
    run: 'r',
    step: 4,
    status: 'pending',
    agent: 'a'
  });
  assert.equal(parseTeaMeta({ run: 'r' }), null);
  assert.equal(parseTeaMeta(null), null);
});

test("a cell is a proposal's by id and run: a new kernel numbers its proposals from p1 again", () => {
  const meta = teaMetaFor(proposal());
  assert.equal(isCellOf(meta, { id: 'p3', run: '0123456789abcdef' }), true);
  assert.equal(isCellOf(meta, { id: 'p3', run: 'another-run' }), false);
  assert.equal(isCellOf(meta, { id: 'p1', run: '0123456789abcdef' }), false);
  assert.equal(isCellOf({ ...meta, run: '' }, { id: 'p3', run: 'any' }), true); // metadata without its run
  assert.equal(isCellOf(null, { id: 'p3', run: '' }), false);
});

test('what ran decides the status: edited when the person changed the code', () => {
  assert.equal(ranStatus('x = 1\n', 'x = 1'), 'ran');
  assert.equal(ranStatus('x = 1', 'x = 2'), 'edited');
});

test('a line diff keeps, removes and adds lines', () => {
  const d = lineDiff("a = rows\nb = a['price']\nprint(b)", "a = rows\nb = a.get('price')\nprint(b)\n");
  assert.deepEqual(d, [
    { kind: ' ', text: 'a = rows' },
    { kind: '-', text: "b = a['price']" },
    { kind: '+', text: "b = a.get('price')" },
    { kind: ' ', text: 'print(b)' }
  ]);
  assert.deepEqual(lineDiff('', 'x'), [{ kind: '+', text: 'x' }]);
  assert.deepEqual(lineDiff('x\ny', 'y'), [
    { kind: '-', text: 'x' },
    { kind: ' ', text: 'y' }
  ]);
});

test("an edit's diff is computed from the cell's source now, whatever diff the kernel sent", () => {
  const p = proposal({ kind: 'edit', cell_id: 'c1', code: "x = 1\ny = d.get('k')", diff: "-y = d['k']+y = d.get('k')" });
  assert.deepEqual(proposalDiff(p, "x = 1\ny = d['k']"), [
    { kind: ' ', text: 'x = 1' },
    { kind: '-', text: "y = d['k']" },
    { kind: '+', text: "y = d.get('k')" }
  ]);
});

test('an edit whose target changed is a conflict', async () => {
  const source = "y = d['k']";
  const hash = createHash('sha256').update(source, 'utf8').digest('hex');
  assert.equal(await sha256Hex(source), hash);
  assert.equal(await sha256Hex('é'), createHash('sha256').update('é', 'utf8').digest('hex'));
  const p = proposal({ kind: 'edit', cell_id: 'c1', code: "y = d.get('k')", base_hash: hash.toUpperCase() });
  assert.equal(await editConflict(p, source, 'whatever was shown'), false);
  assert.equal(await editConflict(p, source + '  # mine', source), true);
  // without base_hash: against the source the cell had when the proposal was shown
  const q = { ...p, base_hash: '' };
  assert.equal(await editConflict(q, source, source), false);
  assert.equal(await editConflict(q, 'changed', source), true);
});

test('Fix with agent: only on an error, only for a plain cell id', () => {
  assert.equal(lastOutputIsError([]), false);
  assert.equal(lastOutputIsError([{ output_type: 'stream' }, { output_type: 'error', ename: 'KeyError' }]), true);
  assert.equal(lastOutputIsError([{ output_type: 'error' }, { output_type: 'stream' }]), false);
  assert.equal(fixCommand('5f1c2a9e-77b4-4c1e'), '%tea fix 5f1c2a9e-77b4-4c1e');
  assert.throws(() => fixCommand('x; import os'), /unexpected characters/);
});

test("the page's messages have the shared design's shapes", () => {
  assert.deepEqual(shownMessage('p3', 'c9', 12.5), { type: 'shown', proposal: 'p3', cell_id: 'c9', t_page: 12.5 });
  assert.deepEqual(shownMessage('p3', '', 1, 'cell c1 does not exist'), {
    type: 'shown',
    proposal: 'p3',
    cell_id: '',
    t_page: 1,
    error: 'cell c1 does not exist'
  });
  assert.deepEqual(decisionMessage('p3', 'run', 'x = 1'), { type: 'decision', proposal: 'p3', decision: 'run', source: 'x = 1' });
  assert.deepEqual(decisionMessage('p4', 'run', 'x = 2', 'x = 1'), {
    type: 'decision',
    proposal: 'p4',
    decision: 'run',
    source: 'x = 2',
    base_source: 'x = 1'
  });
  assert.deepEqual(executedMessage('p3', 'c9', 4, true, [{ output_type: 'stream', name: 'stdout', text: '3\n' }]), {
    type: 'executed',
    proposal: 'p3',
    cell_id: 'c9',
    execution_count: 4,
    ok: true,
    outputs: [{ output_type: 'stream', name: 'stdout', text: '3\n' }]
  });
  const cell = { id: 'c1', index: 0, cell_type: 'code', source: 'x', execution_count: null, outputs: [], tea: null };
  assert.deepEqual(cellsReply('r7', [cell]), { type: 'cells', id: 'r7', cells: [cell] });
});

test('the kernel is sent text outputs whole, other types by name only', () => {
  const outputs = [
    { output_type: 'stream', name: 'stdout', text: 'hi\n' },
    { output_type: 'execute_result', execution_count: 3, data: { 'text/plain': '42', 'image/png': 'iVBOR…' }, metadata: {} },
    { output_type: 'display_data', data: { 'application/vnd.tea.trajectory+json': { steps: [1, 2, 3] } }, metadata: {} },
    { output_type: 'error', ename: 'KeyError', evalue: "'b'", traceback: ['…'] }
  ];
  assert.deepEqual(slimOutputs(outputs), [
    outputs[0],
    { output_type: 'execute_result', execution_count: 3, data: { 'text/plain': '42', 'image/png': '' }, metadata: {} },
    { output_type: 'display_data', data: { 'application/vnd.tea.trajectory+json': '' }, metadata: {} },
    outputs[3]
  ]);
});

test('a new cell goes below its anchor, or at the end', () => {
  assert.equal(insertIndex(['a', 'b', 'c'], 'a'), 1);
  assert.equal(insertIndex(['a', 'b', 'c'], 'gone'), 3);
  assert.equal(insertIndex(['a', 'b', 'c'], ''), 3);
});
