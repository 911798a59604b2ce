// WarpForge search view (webview script; loaded under a strict CSP with a nonce, no inline handlers).
// Draws the job's search tree and the best-speedup-over-evaluations plot from messages the extension posts.
(function () {
  'use strict';
  const vscode = acquireVsCodeApi();
  const saved = vscode.getState() || {};
  const collapsed = new Set(saved.collapsed || []);
  const SVG = 'http://www.w3.org/2000/svg';
  let last = null;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function fmt(x) {
    return typeof x === 'number' ? x.toFixed(2) + '×' : '';
  }
  function save() {
    vscode.setState({ collapsed: [...collapsed] });
  }

  function summary(tree, best) {
    document.getElementById('title').textContent = 'WarpForge search: ' + (tree.kernel || '');
    const parts = [];
    parts.push((tree.strategy || '') + ' search');
    parts.push(tree.state === 'running' ? 'running' : tree.state);
    const evals = tree.nodes.filter((n) => n.eval_index !== null && n.eval_index !== undefined).length;
    parts.push(evals + ' evaluated');
    if (tree.message) parts.push(tree.message);
    else if (best) parts.push('best verified so far ' + fmt(best.speedup) + (best.gpu ? ' on ' + best.gpu : ''));
    const p = document.getElementById('summary');
    p.textContent = parts.join(' · ');
    p.className = tree.state === 'running' ? 'running' : 'muted';
  }

  function plot(tree) {
    const host = document.getElementById('plot');
    host.replaceChildren();
    const hist = (tree.history || []).filter((h) => typeof h.best_speedup === 'number');
    if (hist.length === 0) {
      host.appendChild(el('p', 'muted', tree.state === 'running' ? 'Waiting for the first evaluations…' : 'No evaluations.'));
      return;
    }
    const W = 560, H = 170, L = 44, R = 12, T = 10, B = 28;
    const xmax = Math.max(1, ...hist.map((h) => h.evaluations));
    const ymax = Math.max(1.1, ...hist.map((h) => h.best_speedup)) * 1.05;
    const ymin = Math.min(1, ...hist.map((h) => h.best_speedup));
    const x = (v) => L + ((W - L - R) * v) / xmax;
    const y = (v) => T + (H - T - B) * (1 - (v - ymin) / (ymax - ymin || 1));
    const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', class: 'plot',
      'aria-label': 'best speedup ' + fmt(hist[hist.length - 1].best_speedup) + ' after ' + xmax + ' evaluations' });
    s.appendChild(svg('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, class: 'axis' }));
    s.appendChild(svg('line', { x1: L, y1: T, x2: L, y2: H - B, class: 'axis' }));
    s.appendChild(svg('line', { x1: L, y1: y(1), x2: W - R, y2: y(1), class: 'baseline' }));
    const yticks = [ymin, 1, (ymin + ymax) / 2, ymax / 1.05].filter((v, i, a) => a.findIndex((w) => Math.abs(w - v) < (ymax - ymin) / 12) === i);
    for (const v of yticks) {
      s.appendChild(svg('text', { x: L - 6, y: y(v) + 4, class: 'tick', 'text-anchor': 'end' }, fmt(v)));
    }
    for (const v of [0, Math.round(xmax / 2), xmax]) {
      s.appendChild(svg('text', { x: x(v), y: H - B + 16, class: 'tick', 'text-anchor': 'middle' }, v));
    }
    s.appendChild(svg('text', { x: (L + W - R) / 2, y: H - 2, class: 'tick', 'text-anchor': 'middle' }, 'evaluations'));
    // a step line: the best so far holds until the next improvement
    let d = `M ${x(0)} ${y(Math.max(ymin, Math.min(1, hist[0].best_speedup)))}`;
    let prev = null;
    for (const h of hist) {
      if (prev !== null) d += ` L ${x(h.evaluations)} ${y(prev)}`;
      else d += ` L ${x(h.evaluations)} ${y(h.best_speedup)}`;
      d += ` L ${x(h.evaluations)} ${y(h.best_speedup)}`;
      prev = h.best_speedup;
    }
    s.appendChild(svg('path', { d, class: 'curve' }));
    let best = -Infinity;
    for (const h of hist) {
      if (h.best_speedup > best) {
        best = h.best_speedup;
        const c = svg('circle', { cx: x(h.evaluations), cy: y(h.best_speedup), r: 3, class: 'point' });
        c.appendChild(svg('title', {}, fmt(h.best_speedup) + ' after ' + h.evaluations + ' evaluations'));
        s.appendChild(c);
      }
    }
    host.appendChild(s);
  }

  function tree(t, best) {
    const host = document.getElementById('tree');
    host.replaceChildren();
    const byId = new Map(t.nodes.map((n) => [n.id, n]));
    const roots = t.nodes.filter((n) => n.parent === null || !byId.has(n.parent));
    if (roots.length === 0) {
      host.appendChild(el('p', 'muted', 'No variants yet.'));
      return;
    }
    const bestSpeed = Math.max(0, ...t.nodes.map((n) => n.speedup || 0));
    const ul = el('ul', 'tree');
    ul.setAttribute('role', 'tree');
    for (const r of roots) ul.appendChild(node(r, byId, t, bestSpeed));
    host.appendChild(ul);
  }

  function node(n, byId, t, bestSpeed) {
    const li = el('li', 'node');
    li.setAttribute('role', 'treeitem');
    li.dataset.id = String(n.id);
    const row = el('div', 'row');
    const kids = (n.children || []).map((id) => byId.get(id)).filter(Boolean);
    const toggle = el('button', 'toggle', kids.length ? (collapsed.has(n.id) ? '▸' : '▾') : '');
    toggle.disabled = kids.length === 0;
    toggle.setAttribute('aria-label', collapsed.has(n.id) ? 'expand' : 'collapse');
    toggle.addEventListener('click', () => {
      if (collapsed.has(n.id)) collapsed.delete(n.id); else collapsed.add(n.id);
      save();
      if (last) render(last);
    });
    row.appendChild(toggle);
    const isRoot = n.parent === null;
    const label = el('button', 'label');
    const head = el('span', 'head');
    // ok but partly checked: its checks stopped after the first run (clearly slower than the best); never offered
    const partly = n.status === 'ok' && n.verified === false;
    head.appendChild(el('span', 'status status-' + (partly ? 'partly' : String(n.status).replace(/[^a-z_]/gi, '')),
      isRoot ? 'baseline' : partly ? 'ok, 1 run checked' : n.status));
    head.appendChild(el('span', 'family', isRoot ? 'original kernel' : n.family));
    if (typeof n.speedup === 'number' && !isRoot) {
      head.appendChild(el('span', 'speedup' + (n.speedup > 1 ? ' faster' : ' slower'), fmt(n.speedup)));
      if (n.speedup === bestSpeed && bestSpeed > 1) head.appendChild(el('span', 'best', '★ best'));
    }
    label.appendChild(head);
    // why it failed (the evaluation's reason) or else what it tried (the candidate's rationale)
    const failed = n.reason && n.status !== 'ok';
    const why = failed ? n.reason : n.rationale || n.reason || '';
    if (why && !isRoot) label.appendChild(el('span', failed ? 'reason failed' : 'reason', why));
    label.title = [n.rationale, n.reason, partly ? 'checked on its first run only: the timing showed it clearly slower ' +
      'than the best so far, so the rest of its verification was skipped (it cannot be accepted)' : '']
      .filter(Boolean).join('\n') + (isRoot ? '' : '\n(click to open the diff)');
    if (isRoot) {
      label.disabled = true;
    } else {
      label.addEventListener('click', () => vscode.postMessage({ type: 'open', job: t.job, node: n.id }));
    }
    row.appendChild(label);
    li.appendChild(row);
    if (kids.length && !collapsed.has(n.id)) {
      const ul = el('ul', 'children');
      ul.setAttribute('role', 'group');
      for (const k of kids) ul.appendChild(node(k, byId, t, bestSpeed));
      li.appendChild(ul);
    }
    return li;
  }

  // The job's result stays here until the user acts on it (the notification fades after a few seconds).
  function result(r, job) {
    const host = document.getElementById('result');
    host.replaceChildren();
    if (!r || r.state === 'running') {
      host.className = '';
      return;
    }
    host.className = 'result result-' + r.state;
    host.appendChild(el('p', 'result-text', r.text));
    if (r.state === 'pending' && r.candidate) {
      const bar = el('div', 'actions');
      for (const [type, label] of [['review', 'Review Diff'], ['accept', 'Accept'], ['reject', 'Reject'], ['next', 'Next Variant']]) {
        const b = el('button', 'action action-' + type, label);
        b.addEventListener('click', () => vscode.postMessage({ type, job, candidate: r.candidate }));
        bar.appendChild(b);
      }
      host.appendChild(bar);
    }
  }

  function render(m) {
    result(m.result, m.tree.job);
    summary(m.tree, m.best);
    plot(m.tree);
    tree(m.tree, m.best);
  }

  window.addEventListener('message', (ev) => {
    const m = ev.data;
    if (m.type === 'tree') {
      last = m;
      render(m);
    } else if (m.type === 'error' || m.type === 'gone') {
      const p = document.getElementById('summary');
      p.textContent = m.message;
      p.className = 'error';
    }
  });
  vscode.postMessage({ type: 'ready' });
})();
