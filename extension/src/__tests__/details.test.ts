/**
 * Unit tests of how the sidebar shows an item's details: source as code, a schema as its
 * parameters, usage as a key/value table, versions as a table, never raw JSON.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { cellText, describeDetail, typeOf } from '../details';

test('a tool source is code, kept line by line', () => {
  const source = 'def add(a: int, b: int) -> int:\n    """Add."""\n    return a + b';
  assert.deepEqual(describeDetail('source', source), { kind: 'code', text: source });
});

test('usage is a key/value table with readable keys', () => {
  assert.deepEqual(describeDetail('usage', { calls: 3, failures: 0, mean_latency_ms: 12.5 }), {
    kind: 'table',
    columns: [],
    rows: [
      ['calls', '3'],
      ['failures', '0'],
      ['mean latency (ms)', '12.5']
    ]
  });
});

test('versions are a table: one row per version, the current one ticked', () => {
  const versions = [
    { version: 2, hash: 'abc', current: true, note: 'fixed' },
    { version: 1, hash: 'def', current: false, note: '' }
  ];
  assert.deepEqual(describeDetail('versions', versions), {
    kind: 'table',
    columns: ['version', 'hash', 'current', 'note'],
    rows: [
      ['2', 'abc', '✓', 'fixed'],
      ['1', 'def', '', '']
    ]
  });
  // a column empty in every row is left out (the sidebar is narrow)
  assert.deepEqual(describeDetail('versions', [{ version: 1, hash: 'def', current: true, note: '' }]), {
    kind: 'table',
    columns: ['version', 'hash', 'current'],
    rows: [['1', 'def', '✓']]
  });
});

test('a schema shows as its parameters with types and what is required', () => {
  const schema = {
    type: 'object',
    properties: {
      a: { type: 'integer', description: 'first' },
      tags: { type: 'array', items: { type: 'string' } },
      mode: { anyOf: [{ type: 'string' }, { type: 'null' }] }
    },
    required: ['a']
  };
  assert.deepEqual(describeDetail('schema', schema), {
    kind: 'table',
    columns: ['parameter', 'type', 'required', 'description'],
    rows: [
      ['a', 'integer', '✓', 'first'],
      ['tags', 'array of string', '', ''],
      ['mode', 'string | null', '', '']
    ]
  });
  assert.deepEqual(describeDetail('schema', { properties: { x: { type: 'number' } } }), {
    kind: 'table',
    columns: ['parameter', 'type'],
    rows: [['x', 'number']]
  });
  assert.deepEqual(describeDetail('schema', { type: 'object', properties: {} }), {
    kind: 'text',
    text: 'no parameters'
  });
});

test('lists, multi-line text, plain values and empties', () => {
  assert.deepEqual(describeDetail('tools', ['add', 'shout']), { kind: 'list', items: ['add', 'shout'] });
  assert.deepEqual(describeDetail('rules', 'one\ntwo'), { kind: 'pre', text: 'one\ntwo' });
  assert.deepEqual(describeDetail('category', 'math'), { kind: 'text', text: 'math' });
  assert.equal(describeDetail('model', null), null);
  assert.equal(describeDetail('tools', []), null);
  assert.equal(describeDetail('provenance', { origin: '' }), null);
  assert.equal(typeOf({ $ref: '#/$defs/Point' }), 'Point');
  assert.equal(cellText({ nested: 1 }), '{"nested":1}');
});
