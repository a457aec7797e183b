"""The JavaScript the browser environment runs in pages: its init script, the snapshot of
interactive elements, the page as markdown, scrolling, element descriptions, popup counting."""

POPUP_LIMIT = 8  # windows one page may open (window.open, links to a new tab); past it they do not open

INIT_SCRIPT = """
(() => {
  if (window.__teaInit) return;
  window.__teaInit = true;
  window.__teaPopups = 0;
  const open = window.open;
  // a page that opens hundreds of windows gets a few (the environment closes any past its tab limit)
  window.__teaOpened = 0;
  window.open = function (...args) {
    window.__teaOpened += 1;
    if (window.__teaOpened > POPUP_LIMIT) return null;
    window.__teaPopups += 1;
    return open.apply(this, args);
  };
  // a link or form that targets another window (its own target, or the page's <base target>)
  const elsewhere = (el) => {
    const base = document.querySelector('base[target]');
    const target = ((el && el.getAttribute('target')) || (base && base.getAttribute('target')) || '').toLowerCase();
    return target !== '' && !['_self', '_parent', '_top'].includes(target);
  };
  const another = () => { window.__teaOpened += 1; return window.__teaOpened <= POPUP_LIMIT; };
  // on the window, capturing: before any listener of the page's own
  window.addEventListener('click', (event) => {
    const a = event.target && event.target.closest && event.target.closest('a[href]');
    if (!a || !elsewhere(a)) return;
    if (!another()) { event.preventDefault(); return; }
    window.__teaPopups += 1;
  }, true);
  window.addEventListener('submit', (event) => {
    if (elsewhere(event.target) && !another()) event.preventDefault();
  }, true);
  const submit = HTMLFormElement.prototype.submit;  // form.submit() fires no submit event
  HTMLFormElement.prototype.submit = function () {
    if (elsewhere(this) && !another()) return;
    return submit.apply(this);
  };
})();
"""
INIT_SCRIPT = INIT_SCRIPT.replace("POPUP_LIMIT", str(POPUP_LIMIT))

# The state snapshot: where the page is and its visible interactive elements, each with a
# selector that click/input accept (the element's unique id, or a data-tea attribute set here).
SNAPSHOT_JS = """
(max) => {
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0) return false;
    const s = getComputedStyle(el);
    return s.visibility !== 'hidden' && s.display !== 'none';
  };
  const one = (s) => (s || '').replace(/\\s+/g, ' ').trim();
  const query = 'a[href], button, input:not([type=hidden]), select, textarea, summary, [role=button], '
    + '[role=link], [role=tab], [role=menuitem], [onclick], [contenteditable=""], [contenteditable=true]';
  const nodes = document.querySelectorAll(query);
  const inView = [], below = [];
  let total = 0;
  for (let i = 0; i < nodes.length && i < 4000; i++) {
    const el = nodes[i];
    if (!visible(el)) continue;
    total += 1;
    const r = el.getBoundingClientRect();
    if (r.bottom >= 0 && r.top <= innerHeight) { if (inView.length < max) inView.push(el); }
    else if (below.length < max) below.push(el);
  }
  if (window.__teaSeq === undefined) window.__teaSeq = 0;
  const elements = inView.concat(below).slice(0, max).map((el) => {
    let selector;
    if (el.id && document.querySelectorAll('#' + CSS.escape(el.id)).length === 1) {
      selector = '#' + CSS.escape(el.id);
    } else {
      let key = el.getAttribute('data-tea');
      if (!key) { window.__teaSeq += 1; key = String(window.__teaSeq); el.setAttribute('data-tea', key); }
      selector = '[data-tea="' + key + '"]';
    }
    const tag = el.tagName.toLowerCase();
    let kind = el.getAttribute('role') || (tag === 'a' ? 'link' : tag);
    if (tag === 'input') kind = 'input[' + (el.getAttribute('type') || 'text').toLowerCase() + ']';
    const text = one(el.innerText || (['submit', 'button', 'reset'].includes(el.type) ? el.value : '')
      || el.getAttribute('aria-label') || el.title || el.getAttribute('alt') || '').slice(0, 60);
    const out = { selector, kind, text };
    if (tag === 'a') out.href = (el.getAttribute('href') || '').slice(0, 80);
    if (tag === 'input' || tag === 'textarea' || tag === 'select') {
      if (el.name) out.name = el.name;
      if (el.placeholder) out.placeholder = el.placeholder.slice(0, 40);
      if (el.value && !['submit', 'button', 'reset'].includes(el.type)) out.value = String(el.value).slice(0, 40);
      if (el.type === 'checkbox' || el.type === 'radio') out.checked = el.checked;
    }
    return out;
  });
  const doc = document.documentElement;
  const height = Math.max(doc ? doc.scrollHeight : 0, document.body ? document.body.scrollHeight : 0);
  return {
    url: location.href, title: document.title, contentType: document.contentType,
    scrollY: Math.round(window.scrollY), height, viewport: innerHeight, total, elements,
  };
}
"""

# HTML → markdown, in the page: headings, paragraphs, links as [text](href), lists, tables, code.
MARKDOWN_JS = """
([selector, limit]) => {
  const root = selector ? document.querySelector(selector) : (document.body || document.documentElement);
  if (!root) return null;
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'SVG', 'CANVAS', 'IFRAME', 'OBJECT', 'EMBED',
    'HEAD', 'META', 'LINK', 'MATH']);
  const BLOCK = new Set(['P', 'DIV', 'SECTION', 'ARTICLE', 'MAIN', 'HEADER', 'FOOTER', 'NAV', 'ASIDE', 'FORM',
    'FIELDSET', 'FIGURE', 'FIGCAPTION', 'DETAILS', 'SUMMARY', 'ADDRESS', 'DL', 'DT', 'DD', 'CENTER', 'LEGEND',
    'BODY', 'HTML', 'TR', 'LI', 'DIALOG']);
  const abs = (u) => { try { return new URL(u, document.baseURI).href; } catch (e) { return u; } };
  const one = (s) => (s || '').replace(/\\s+/g, ' ').trim();
  const hidden = (el) => {
    if (el.hidden || el.getAttribute('aria-hidden') === 'true') return true;
    const s = getComputedStyle(el);
    return s.display === 'none' || s.visibility === 'hidden';
  };
  let size = 0;
  const kids = (el) => {
    let out = '';
    for (const c of el.childNodes) { if (size > limit) break; out += walk(c); }
    return out;
  };
  const wrap = (mark, el) => { const t = one(kids(el)); return t ? mark + t + mark : ''; };
  function list(el, ordered) {
    let n = parseInt(el.getAttribute('start') || '1', 10) || 1;
    let out = '\\n';
    for (const li of el.children) {
      if (li.tagName !== 'LI' || hidden(li)) continue;
      const bullet = ordered ? (n++) + '. ' : '- ';
      const body = kids(li).replace(/\\n\\s*\\n/g, '\\n').trim();
      out += '\\n' + bullet + body.replace(/\\n/g, '\\n' + ' '.repeat(bullet.length));
    }
    return out + '\\n\\n';
  }
  function table(el) {
    const rows = [];
    for (const tr of el.querySelectorAll('tr')) {
      if (tr.closest('table') !== el || hidden(tr)) continue;
      const cells = [...tr.children].filter((c) => c.tagName === 'TD' || c.tagName === 'TH')
        .map((c) => one(kids(c)).replace(/\\|/g, '\\\\|'));
      if (cells.length) rows.push(cells);
      if (rows.length >= 300 || size > limit) break;
    }
    if (!rows.length) return '';
    const width = Math.max(...rows.map((r) => r.length));
    const line = (r) => '| ' + r.concat(Array(width - r.length).fill('')).join(' | ') + ' |';
    return '\\n\\n' + [line(rows[0]), '|' + ' --- |'.repeat(width), ...rows.slice(1).map(line)].join('\\n') + '\\n\\n';
  }
  function field(el) {
    const tag = el.tagName;
    const type = (el.getAttribute('type') || 'text').toLowerCase();
    if (tag === 'INPUT' && type === 'hidden') return '';
    const isButton = ['submit', 'button', 'reset', 'image'].includes(type);
    if (tag === 'INPUT' && isButton) return '[' + one(el.value || type) + ']';
    if (tag === 'INPUT' && (type === 'checkbox' || type === 'radio')) return el.checked ? '[x] ' : '[ ] ';
    if (tag === 'SELECT') {
      const o = el.selectedOptions && el.selectedOptions[0];
      return '[select' + (el.name ? ' ' + el.name : '') + ': ' + (o ? one(o.text) : '') + ']';
    }
    let out = '[' + (tag === 'TEXTAREA' ? 'textarea' : 'input') + (el.name ? ' ' + el.name : '');
    if (el.placeholder) out += ' "' + one(el.placeholder) + '"';
    if (el.value) out += ' = "' + one(el.value).slice(0, 80) + '"';
    return out + ']';
  }
  function walk(node) {
    if (node.nodeType === 3) { const t = node.data.replace(/\\s+/g, ' '); size += t.length; return t; }
    if (node.nodeType !== 1) return '';
    const el = node;
    const tag = el.tagName.toUpperCase();
    if (SKIP.has(tag) || (tag === 'DIALOG' && !el.open) || hidden(el)) return '';
    switch (tag) {
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6': {
        const t = one(kids(el));
        return t ? '\\n\\n' + '#'.repeat(Number(tag[1])) + ' ' + t + '\\n\\n' : '';
      }
      case 'BR': return '\\n';
      case 'HR': return '\\n\\n---\\n\\n';
      case 'A': {
        const text = one(kids(el)) || one(el.getAttribute('aria-label') || el.title || '');
        const href = el.getAttribute('href');
        if (!href || !text || /^\\s*javascript:/i.test(href)) return text;
        return '[' + text + '](' + abs(href) + ')';
      }
      case 'IMG': {
        const alt = one(el.getAttribute('alt'));
        const src = el.getAttribute('src') || '';
        if (!alt) return '';
        return src && !src.startsWith('data:') ? '![' + alt + '](' + abs(src) + ')' : '[image: ' + alt + ']';
      }
      case 'STRONG': case 'B': return wrap('**', el);
      case 'EM': case 'I': return wrap('*', el);
      case 'CODE': case 'KBD': case 'SAMP': { const t = one(el.textContent); return t ? '`' + t + '`' : ''; }
      case 'PRE': {
        size += el.innerText.length;
        return '\\n\\n```\\n' + el.innerText.replace(/\\n+$/, '') + '\\n```\\n\\n';
      }
      case 'UL': case 'MENU': return list(el, false);
      case 'OL': return list(el, true);
      case 'TABLE': return table(el);
      case 'BLOCKQUOTE': {
        const t = kids(el).replace(/\\n\\s*\\n/g, '\\n').trim();
        return t ? '\\n\\n' + t.split('\\n').map((l) => '> ' + l.trim()).join('\\n') + '\\n\\n' : '';
      }
      case 'INPUT': case 'TEXTAREA': case 'SELECT': return field(el);
      case 'BUTTON': { const t = one(kids(el)); return t ? '[' + t + ']' : ''; }
    }
    const inner = kids(el);
    return BLOCK.has(tag) ? '\\n\\n' + inner + '\\n\\n' : inner;
  }
  const md = walk(root);
  return md.split('\\n').map((l) => {
    const t = l.replace(/\\s+$/, '');
    return /^\\s*(?:- |\\d+\\. )/.test(t) ? t : t.trimStart();
  }).join('\\n').replace(/\\n{3,}/g, '\\n\\n').trim();
}
"""

SCROLL_JS = """
([dy, pages]) => {
  const delta = pages ? dy * window.innerHeight : dy;
  const doc = document.scrollingElement || document.documentElement;
  const before = window.scrollY;
  window.scrollBy({ top: delta, left: 0, behavior: 'instant' });
  let moved = window.scrollY - before, where = 'page', y = window.scrollY, height = doc.scrollHeight;
  if (moved === 0) {  // the content may scroll inside an element: the largest scrollable one
    let best = null, area = 0;
    for (const el of document.querySelectorAll('body *')) {
      if (el.scrollHeight <= el.clientHeight + 1) continue;
      const s = getComputedStyle(el).overflowY;
      if (s !== 'auto' && s !== 'scroll') continue;
      const a = el.clientWidth * el.clientHeight;
      if (a > area) { best = el; area = a; }
    }
    if (best) {
      const b = best.scrollTop;
      best.scrollBy({ top: pages ? dy * best.clientHeight : dy, behavior: 'instant' });
      moved = best.scrollTop - b; where = 'element'; y = best.scrollTop; height = best.scrollHeight;
    }
  }
  return { moved: Math.round(moved), y: Math.round(y), height, where };
}
"""

DESCRIBE_JS = """(el) => el.tagName.toLowerCase() + ' ' + JSON.stringify(((el.innerText || el.value
  || el.getAttribute('aria-label') || el.placeholder || '') + '').replace(/\\s+/g, ' ').trim().slice(0, 60))"""
POPUPS_JS = "() => { const n = window.__teaPopups || 0; window.__teaPopups = 0; return n; }"

# [url, maxBytes] -> {base64} or {error}: a file fetched by the page, so through the browser's proxy
FETCH_JS = """async ([url, maxBytes]) => {
  let r;
  try { r = await fetch(url, { credentials: 'include' }); }
  catch (e) { return { error: 'fetching ' + url + ' failed: ' + e }; }
  if (!r.ok) return { error: 'fetching ' + url + ' gave HTTP ' + r.status };
  const bytes = new Uint8Array(await r.arrayBuffer());
  if (bytes.length > maxBytes) return { error: url + ' is larger than ' + maxBytes + ' bytes' };
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return { base64: btoa(text) };
}"""


# -- finding a browser -------------------------------------------------------------------------------
