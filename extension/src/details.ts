/**
 * How the sidebar shows an item's details: pure functions from the kernel's JSON to display parts
 * (source as code, usage as a key/value table, versions as a table, a schema as its parameters),
 * so that nothing reaches a person as raw JSON. The sidebar turns each part into DOM.
 */

export type Detail =
  | { kind: 'code'; text: string }
  | { kind: 'pre'; text: string }
  | { kind: 'text'; text: string }
  | { kind: 'list'; items: string[] }
  | { kind: 'table'; columns: string[]; rows: string[][] };

const LABELS: Record<string, string> = {
  mean_latency_ms: 'mean latency (ms)',
  source_run: 'source run',
  created_by: 'created by',
  run_id: 'run',
  fork_step: 'fork step',
  forked_from: 'forked from',
  max_steps: 'max steps'
};

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function empty(value: unknown): boolean {
  return value === null || value === undefined || value === '' || (Array.isArray(value) && !value.length);
}

/** A key as a person reads it. */
export function label(key: string): string {
  return LABELS[key] ?? key.replace(/_/g, ' ');
}

/** One value in a table cell or a list. */
export function cellText(value: unknown): string {
  if (value === null || value === undefined) {
    return '';
  }
  if (typeof value === 'boolean') {
    return value ? '✓' : '';
  }
  if (typeof value === 'string') {
    return value;
  }
  if (typeof value === 'number') {
    return String(value);
  }
  if (Array.isArray(value) && value.every(v => typeof v !== 'object' || v === null)) {
    return value.map(cellText).join(', ');
  }
  return JSON.stringify(value);
}

/** A JSON schema's type, shortly: `string`, `integer | null`, `array of string`, a $ref's name. */
export function typeOf(schema: unknown): string {
  if (!isRecord(schema)) {
    return '';
  }
  if (typeof schema.$ref === 'string') {
    return schema.$ref.split('/').pop() ?? '';
  }
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(alternatives)) {
    return alternatives.map(typeOf).filter(Boolean).join(' | ');
  }
  if (Array.isArray(schema.enum)) {
    return schema.enum.map(v => JSON.stringify(v)).join(' | ');
  }
  const type = Array.isArray(schema.type) ? schema.type.join(' | ') : String(schema.type ?? '');
  if (type === 'array' && schema.items) {
    return `array of ${typeOf(schema.items) || 'any'}`;
  }
  return type;
}

/** A table without the columns that are empty in every row (a narrow sidebar has no room for them). */
function table(columns: string[], rows: string[][], keep = 1): Detail {
  const used = columns.map((_, i) => i < keep || rows.some(r => r[i] !== ''));
  return {
    kind: 'table',
    columns: columns.filter((_, i) => used[i]),
    rows: rows.map(r => r.filter((_, i) => used[i]))
  };
}

function schemaTable(schema: Record<string, unknown>): Detail {
  const properties = isRecord(schema.properties) ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required.map(String) : []);
  const rows = Object.entries(properties).map(([name, prop]) => [
    name,
    typeOf(prop),
    required.has(name) ? '✓' : '',
    isRecord(prop) ? cellText(prop.description) : ''
  ]);
  if (!rows.length) {
    return { kind: 'text', text: 'no parameters' };
  }
  return table(['parameter', 'type', 'required', 'description'], rows, 2);
}

function recordsTable(records: Record<string, unknown>[]): Detail {
  const columns: string[] = [];
  for (const r of records) {
    for (const k of Object.keys(r)) {
      if (!columns.includes(k)) {
        columns.push(k);
      }
    }
  }
  return table(columns.map(label), records.map(r => columns.map(c => cellText(r[c]))));
}

/** How to show the detail `key` of an item (null: nothing worth showing). */
export function describeDetail(key: string, value: unknown): Detail | null {
  if (empty(value)) {
    return null;
  }
  if (key === 'source' && typeof value === 'string') {
    return { kind: 'code', text: value };
  }
  if (key === 'schema' && isRecord(value)) {
    return schemaTable(value);
  }
  if (Array.isArray(value)) {
    return value.every(isRecord)
      ? recordsTable(value as Record<string, unknown>[])
      : { kind: 'list', items: value.map(cellText) };
  }
  if (isRecord(value)) {
    const rows = Object.entries(value)
      .filter(([, v]) => !empty(v))
      .map(([k, v]) => [label(k), cellText(v)]);
    return rows.length ? { kind: 'table', columns: [], rows } : null;
  }
  const text = cellText(value);
  return text.includes('\n') ? { kind: 'pre', text } : { kind: 'text', text };
}
