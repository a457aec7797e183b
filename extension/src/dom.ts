/** Small DOM helpers shared by the views and the sidebar: text always goes in as text nodes. */

import { highlightPython } from './model';

/** An element with a class and its text (set as textContent: never parsed as HTML). */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** Python source as a <pre> of text nodes, keywords, strings, comments and numbers in classed spans. */
export function highlighted(code: string): HTMLElement {
  const pre = el('pre', 'tea-code');
  for (const tok of highlightPython(code)) {
    if (tok.cls) {
      pre.append(el('span', `tea-tok-${tok.cls}`, tok.text));
    } else {
      pre.append(document.createTextNode(tok.text));
    }
  }
  return pre;
}
