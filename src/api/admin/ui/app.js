// SPDX-License-Identifier: Apache-2.0
// The console's code: reads the admin API of the server that served it (same origin only,
// the token in an Authorization header, kept in this tab's sessionStorage), renders every
// text it receives as text (textContent, never HTML) and draws the charts on canvas.
'use strict';

(function () {
  const TOKEN_KEY = 'sluice.admin_token';
  const RESULTS = ['allowed', 'delayed', 'shadow_limited', 'rollout_limited', 'limited', 'fail_closed', 'fail_open', 'recheck', 'error', 'local', 'local_limited'];
  const COLORS = {
    allowed: '#2e8540', delayed: '#5c6bc0', shadow_limited: '#d9822b', rollout_limited: '#8e24aa',
    limited: '#c62828', fail_closed: '#000000', fail_open: '#6d4c41', recheck: '#00897b', error: '#9e9e9e',
    local: '#7cb342', local_limited: '#ad1457'
  };
  const REFUSED = ['limited', 'rollout_limited', 'fail_closed', 'recheck', 'local_limited'];
  let token = null;
  let view = 'overview';
  let policies = [];        // /v1/policies' list
  let busy = false;
  let lastKey = null;       // {policy, key} of the last explanation by name
  let role = 'act';         // the token's role: 'read' may not act (the server says 403)

  const $ = (id) => document.getElementById(id);

  // An element with attributes and children; strings become text nodes (never markup).
  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = String(v);
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const c of kids.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function table(el, head, rows, empty) {
    clear(el);
    const thead = h('thead', null, h('tr', null, head.map((c) => h('th', { class: c.num ? 'num' : null, text: c.t }))));
    const tb = h('tbody');
    if (rows.length === 0) tb.appendChild(h('tr', null, h('td', { class: 'empty', colspan: head.length, text: empty || 'none' })));
    for (const r of rows) {
      // a phone shows each row as a card: every cell names its column
      Array.from(r.children).forEach((c, i) => { if (head[i] && !c.hasAttribute('colspan')) c.setAttribute('data-label', head[i].t); });
      tb.appendChild(r);
    }
    el.classList.add('cards');
    el.appendChild(thead);
    el.appendChild(tb);
  }
  function td(text, col, num, cls) {
    return h('td', { 'data-col': col, class: [num ? 'num' : '', cls || ''].join(' ').trim() || null, text: text === undefined || text === null ? '' : text });
  }
  function fmtNum(n) { return Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: 1 }) : '–'; }
  function pct(x) { return Number.isFinite(x) ? (x * 100).toFixed(1) + ' %' : '–'; }
  function ts(ms) { const d = new Date(ms); return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z'); }
  function shortTs(s) { return String(s || '').replace('T', ' ').replace(/\.\d+Z$/, 'Z'); }
  function setStatus(msg, err) { const s = $('status'); s.textContent = msg; s.className = err ? 'status err' : 'status'; }

  // ---- the admin API ------------------------------------------------------------------------

  async function api(path, opts) {
    opts = opts || {};
    const headers = {};
    if (token) headers.Authorization = 'Bearer ' + token;
    let body;
    if (opts.json !== undefined) { headers['Content-Type'] = 'application/json'; body = JSON.stringify(opts.json); }
    const r = await fetch(path, {
      method: opts.method || 'GET', headers, body, cache: 'no-store', credentials: 'omit',
      referrerPolicy: 'no-referrer', redirect: 'error'
    });
    if (r.status === 401 && !opts.probe) { showLogin('The token was refused (401): enter it again.'); throw new Error('unauthorized'); }
    const ct = r.headers.get('content-type') || '';
    const data = ct.includes('json') ? await r.json().catch(() => null) : await r.text();
    return { status: r.status, ok: r.ok, data };
  }
  function detail(res) {
    if (res.data && typeof res.data === 'object' && res.data.detail) return res.status + ': ' + res.data.detail;
    return 'HTTP ' + res.status;
  }
  // The overrides API (issue 21) may be absent from this build: 404 "no such endpoint" or 501.
  function overridesMissing(res) {
    return res.status === 501 || (res.status === 404 && res.data && typeof res.data === 'object' &&
      /no such endpoint/.test(res.data.detail || ''));
  }
  const OVR_MISSING = 'overrides API not available on this server';

  function parseMetrics(text) {
    const out = [];
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      if (m[3]) {
        const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
        let l;
        while ((l = re.exec(m[3])) !== null) labels[l[1]] = l[2].replace(/\\n/g, '\n').replace(/\\(.)/g, '$1');
      }
      out.push({ name: m[1], labels, value: Number(m[4]) });
    }
    return out;
  }
  function sum(metrics, name, pred) {
    let s = 0;
    for (const m of metrics) if (m.name === name && (!pred || pred(m.labels))) s += m.value;
    return s;
  }

  // ---- login --------------------------------------------------------------------------------

  function showLogin(msg) {
    token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $('app').hidden = true;
    $('nav').hidden = true;
    $('who').textContent = '';
    $('login').hidden = false;
    $('login-error').textContent = msg || '';
    $('token').focus();
  }
  async function tryToken(t) {
    token = t;
    const r = await api('/v1/whoami', { probe: true });
    if (r.status === 200 && r.data && r.data.authorized) {
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      start(r.data);
      return true;
    }
    token = null;
    return false;
  }
  async function boot() {
    $('login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const t = $('token').value;
      $('token').value = '';
      if (!(await tryToken(t))) showLogin('That token was refused.');
    });
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved && (await tryToken(saved))) return;
    if (await tryToken(null)) return; // the server has no admin token
    showLogin('');
  }

  function start(me) {
    role = (me && me.role) || 'act';
    $('login').hidden = true;
    $('app').hidden = false;
    $('nav').hidden = false;
    clear($('who'));
    $('who').appendChild(document.createTextNode((me && me.caller ? me.caller : 'no token needed') + ' · ' + (me ? me.role : '')));
    if (token) {
      $('who').appendChild(document.createTextNode(' · '));
      $('who').appendChild(h('a', { class: 'plink', href: '#', id: 'signout', text: 'forget token', onclick: (e) => { e.preventDefault(); showLogin(''); } }));
    }
    wire();
    route();
    refresh();
    setInterval(refresh, 2000);
  }

  // ---- routing ------------------------------------------------------------------------------

  let wired = false;
  function wire() {
    if (wired) return;
    wired = true;
    window.addEventListener('hashchange', () => { route(); refresh(); });
    $('pol-select').addEventListener('change', () => { location.hash = '#policy/' + encodeURIComponent($('pol-select').value); });
    $('key-form').addEventListener('submit', (ev) => { ev.preventDefault(); explainNamed(); });
    $('key-attrs-go').addEventListener('click', explainAttrs);
    $('act-reset').addEventListener('click', actReset);
    $('act-ovr-set').addEventListener('click', actOverrideSet);
    $('act-ovr-rm').addEventListener('click', actOverrideRemove);
    $('ch-check').addEventListener('click', checkConfig);
    $('dlg-cancel').addEventListener('click', () => $('dlg').close('cancel'));
  }
  function route() {
    const hsh = location.hash.replace(/^#/, '');
    const [v, arg] = hsh.split('/');
    view = ['overview', 'policy', 'key', 'changes'].includes(v) ? v : 'overview';
    for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + view;
    for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === view);
    if (view === 'policy' && arg) polWanted = decodeURIComponent(arg);
  }
  let polWanted = null;

  // One refresh at a time; a caller may wait for a fresh one (tests: window.__sluiceRefresh).
  let inflight = null;
  function refresh() {
    if (inflight) return inflight;
    inflight = doRefresh().finally(() => { inflight = null; });
    return inflight;
  }
  window.__sluiceRefresh = async () => { if (inflight) await inflight; return refresh(); };

  async function doRefresh() {
    if (busy || $('app').hidden) return;
    busy = true;
    try {
      const r = await api('/v1/policies');
      if (r.ok) policies = r.data.policies || [];
      fillPolicySelects();
      if (view === 'overview') await renderOverview();
      else if (view === 'policy') await renderPolicy();
      else if (view === 'changes') await renderChanges();
      setStatus('updated ' + new Date().toLocaleTimeString() + ' · config generation ' + (r.data && r.data.generation));
    } catch (e) {
      if (e.message !== 'unauthorized') setStatus('error: ' + e.message, true);
    } finally {
      busy = false;
    }
  }

  function fillPolicySelects() {
    for (const id of ['pol-select', 'key-policy']) {
      const sel = $(id);
      const names = policies.map((p) => p.name);
      const have = Array.from(sel.options).map((o) => o.value);
      if (names.join('\n') === have.join('\n')) continue;
      const cur = sel.value;
      clear(sel);
      for (const n of names) sel.appendChild(h('option', { value: n, text: n }));
      if (names.includes(cur)) sel.value = cur;
    }
    if (polWanted && policies.some((p) => p.name === polWanted)) $('pol-select').value = polWanted;
  }

  function modeOf(p) {
    if (p.mode === 'shadow') return ['shadow', 'shadow'];
    if (p.rollout_percent !== undefined && p.rollout_percent < 100) return ['rollout ' + p.rollout_percent + ' %', 'rollout'];
    return ['enforced', 'enforce'];
  }

  // ---- Overview -----------------------------------------------------------------------------

  // Decisions per second over the last 10 whole seconds, from the ring.
  async function rateOf(name) {
    const r = await api('/v1/series?policy=' + encodeURIComponent(name) + '&seconds=11');
    if (!r.ok) return NaN;
    let s = 0;
    for (const w of r.data.windows) for (const res of RESULTS) { const a = w.series[res] || []; for (let i = 0; i < a.length - 1; i++) s += a[i]; }
    return s / 10;
  }

  async function renderOverview() {
    const [mr, rr] = await Promise.all([api('/metrics'), api('/readyz')]);
    const met = typeof mr.data === 'string' ? parseMetrics(mr.data) : [];
    const rates = await Promise.all(policies.map((p) => rateOf(p.name)));
    const rows = policies.map((p, i) => {
      const isP = (l) => l.policy === p.name;
      const total = sum(met, 'sluice_decisions_total', isP);
      const refused = sum(met, 'sluice_decisions_total', (l) => isP(l) && REFUSED.includes(l.result));
      const allowed = sum(met, 'sluice_decisions_total', (l) => isP(l) && (l.result === 'allowed' || l.result === 'delayed'));
      const near = sum(met, 'sluice_near_limit_total', isP);
      const failOpen = sum(met, 'sluice_decisions_total', (l) => isP(l) && l.result === 'fail_open');
      const shadow = sum(met, 'sluice_decisions_total', (l) => isP(l) && l.result === 'shadow_limited');
      const [mode, cls] = modeOf(p);
      return h('tr', { 'data-policy': p.name },
        h('td', { 'data-col': 'policy' }, h('a', { class: 'plink', href: '#policy/' + encodeURIComponent(p.name), text: p.name })),
        td(p.objective || '', 'objective'),
        h('td', { 'data-col': 'mode' }, h('span', { class: 'badge ' + cls, text: mode })),
        td(p.on_store_error === 'closed' ? 'fail closed' : 'fail open', 'failure'),
        td(fmtNum(rates[i]), 'rate', true),
        td(String(total), 'total', true),
        td(total ? pct(refused / total) : '–', 'ratio', true),
        td(total ? pct(shadow / total) : '–', 'shadow', true),
        td(allowed ? pct(near / allowed) : '–', 'near', true),
        td(String(failOpen), 'fail_open', true));
    });
    table($('ov-policies'), [{ t: 'policy' }, { t: 'objective' }, { t: 'mode' }, { t: 'on store error' }, { t: 'decisions/s (10 s)', num: 1 },
      { t: 'decisions', num: 1 }, { t: 'rejected', num: 1 }, { t: 'would limit (shadow)', num: 1 }, { t: 'near limit', num: 1 }, { t: 'failed open', num: 1 }], rows, 'no policies');
    $('ov-ready').textContent = 'HTTP ' + rr.status + '\n' + (typeof rr.data === 'string' ? rr.data : '');
    $('ov-ready').className = 'box ' + (rr.status === 200 && /^ready/.test(rr.data) ? 'ok' : 'bad');
    // store: Redis nodes when there are, else the memory store's fill
    const nodes = met.filter((m) => m.name === 'sluice_redis_node_up');
    const srows = [];
    for (const n of nodes) srows.push(h('tr', null, td(n.labels.node || '', 'node'), h('td', null, h('span', { class: 'badge ' + (n.value ? 'good' : 'bad'), text: n.value ? 'up' : 'down' }))));
    const cap = sum(met, 'sluice_store_capacity_keys'), ent = sum(met, 'sluice_store_entries');
    if (cap) srows.push(h('tr', null, td('memory: entries', 'node'), td(fmtNum(ent) + ' of ' + fmtNum(cap) + ' (' + pct(ent / cap) + ')', 'fill')));
    const errs = met.filter((x) => x.name === 'sluice_store_errors_total');
    const nerr = errs.reduce((a, m) => a + m.value, 0);
    srows.push(h('tr', null, td('store errors', 'node'), td(nerr ? errs.filter((m) => m.value).map((m) => m.labels.kind + ' ' + m.value).join(', ') : 'none', 'errors', false, nerr ? 'bad' : 'ok')));
    for (const m of met.filter((x) => x.name === 'sluice_snapshot_writes_total')) srows.push(h('tr', null, td('snapshots ' + (m.labels.outcome || ''), 'node'), td(String(m.value), 'snap', true)));
    table($('ov-store'), [{ t: 'store' }, { t: 'state' }], srows);
    const rl = met.filter((m) => m.name === 'sluice_reloads_total' && m.value > 0);
    table($('ov-reloads'), [{ t: 'source' }, { t: 'outcome' }, { t: 'count', num: 1 }],
      rl.map((m) => h('tr', null, td(m.labels.source, 'source'), td(m.labels.outcome, 'outcome', false, m.labels.outcome === 'ok' ? 'ok' : 'bad'), td(String(m.value), 'count', true))));
    const au = await api('/v1/audit?n=64');
    const loads = (au.ok ? au.data.entries : []).filter((e) => !e.action && e.source !== 'override').slice(0, 5);
    table($('ov-reload-log'), [{ t: 'when' }, { t: 'source' }, { t: 'by' }, { t: 'outcome' }, { t: 'what' }],
      loads.map((e) => h('tr', null, td(shortTs(e.ts), 'ts'), td(e.source, 'source'), td(e.caller || '', 'caller'),
        td(e.outcome, 'outcome', false, e.outcome === 'ok' ? 'ok' : 'bad'), h('td', { class: 'wrap', text: configSummary(e) }))), 'no reloads');
  }

  // ---- Policy -------------------------------------------------------------------------------

  async function renderPolicy() {
    const name = $('pol-select').value;
    if (!name) return;
    polWanted = name;
    const p = policies.find((x) => x.name === name) || {};
    const [mode] = modeOf(p);
    $('pol-facts').textContent = [p.objective, mode, p.algorithm, p.on_store_error === 'closed' ? 'fails closed' : 'fails open', p.source].filter(Boolean).join(' · ');
    const [sr, tr, rj, ov] = await Promise.all([
      api('/v1/series?policy=' + encodeURIComponent(name) + '&seconds=900'),
      api('/v1/top?policy=' + encodeURIComponent(name) + '&n=10'),
      api('/v1/rejections?policy=' + encodeURIComponent(name) + '&n=20'),
      api('/v1/overrides?policy=' + encodeURIComponent(name) + '&limit=50')]);
    renderCharts(sr, p);
    renderTop(tr, p);
    if (rj.ok) {
      table($('pol-rej'), [{ t: 'when' }, { t: 'key' }, { t: 'window' }, { t: 'verdict' }, { t: 'remaining / limit', num: 1 }, { t: 'retry after', num: 1 }],
        rj.data.rejections.map((e) => h('tr', null, td(ts(e.at_ms), 'ts'), td(e.key !== undefined ? e.key : e.key_hash, 'key'), td(e.window || '', 'window'),
          td(e.verdict, 'verdict'), td(e.remaining + ' / ' + e.limit, 'rl', true), td(e.retry_after_ms === null ? '' : e.retry_after_ms + ' ms', 'retry', true))), 'no rejections recently');
    } else {
      table($('pol-rej'), [{ t: 'latest rejections' }], [], detail(rj));
    }
    renderOverrides(ov);
  }

  function renderCharts(sr, p) {
    const box = $('pol-charts');
    if (!sr.ok) { clear(box).appendChild(h('p', { class: 'empty', text: detail(sr) })); return; }
    const wins = sr.data.windows;
    // one chart per window, kept across refreshes (no flicker)
    if (box.dataset.policy !== sr.data.policy || box.children.length !== wins.length) {
      clear(box);
      box.dataset.policy = sr.data.policy;
      for (const w of wins) {
        const src = (p.windows || []).find((x) => x.name === w.window || x.window === w.window);
        box.appendChild(h('div', { class: 'chart', 'data-window': w.window },
          h('h3', null, 'window ' + w.window + (src && src.window && src.window !== w.window ? ' — ' + src.window : '') +
            (src && src.source ? '  (' + src.source + ')' : '')),
          h('canvas', { width: 900, height: 160, role: 'img', 'aria-label': 'decisions per second in window ' + w.window }),
          h('div', { class: 'legend' })));
      }
    }
    wins.forEach((w, i) => {
      const c = box.children[i];
      drawChart(c.querySelector('canvas'), w.series, sr.data.end_ms);
      const lg = clear(c.querySelector('.legend'));
      for (const res of RESULTS) {
        const tot = (w.series[res] || []).reduce((a, b) => a + b, 0);
        if (tot === 0 && !['allowed', 'limited', 'shadow_limited', 'delayed'].includes(res)) continue;
        lg.appendChild(h('span', { 'data-result': res }, h('i', { class: 'sw-' + res }), res.replace('_', ' ') + ' ', h('b', { 'data-total': res, text: String(tot) })));
      }
      lg.appendChild(h('span', null, 'decisions this window decided, last ' + Math.round((w.series.allowed || []).length / 60) + ' min, 1 s per bar'));
    });
  }

  // Stacked bars, one per second, oldest left; y from 0 to the busiest second.
  function drawChart(cv, series, endMs) {
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(300, cv.clientWidth || 900), H = cv.clientHeight || 160;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) { cv.width = Math.round(W * dpr); cv.height = Math.round(H * dpr); }
    const g = cv.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    const n = (series.allowed || []).length;
    const left = 44, right = 6, top = 6, bottom = 18, pw = W - left - right, ph = H - top - bottom;
    let max = 1;
    for (let t = 0; t < n; t++) { let s = 0; for (const r of RESULTS) s += (series[r] || [])[t] || 0; if (s > max) max = s; }
    const nice = niceMax(max);
    g.font = '11px system-ui, sans-serif';
    g.fillStyle = '#5b6675';
    g.strokeStyle = '#e3e7ec';
    g.lineWidth = 1;
    for (const f of [0, 0.5, 1]) {
      const y = top + ph - f * ph;
      g.beginPath(); g.moveTo(left, Math.round(y) + 0.5); g.lineTo(W - right, Math.round(y) + 0.5); g.stroke();
      g.textAlign = 'right'; g.textBaseline = 'middle';
      g.fillText(fmtNum(nice * f) + '/s', left - 4, y);
    }
    const bw = pw / Math.max(n, 1);
    for (let t = 0; t < n; t++) {
      let y = top + ph;
      for (const r of RESULTS) {
        const v = (series[r] || [])[t] || 0;
        if (!v) continue;
        const hh = (v / nice) * ph;
        g.fillStyle = COLORS[r];
        g.fillRect(left + t * bw, y - hh, Math.max(bw, 1), hh);
        y -= hh;
      }
    }
    g.fillStyle = '#5b6675'; g.textBaseline = 'top';
    // ticks every 5 min (1 min, 10 s for shorter spans), counted back from now
    const step = n >= 600 ? 300 : n >= 120 ? 60 : 10;
    for (let ago = 0; ago <= n; ago += step) {
      const x = left + pw - (ago / Math.max(n, 1)) * pw;
      g.textAlign = ago === 0 ? 'right' : ago + step > n ? 'left' : 'center';
      g.fillText(ago === 0 ? 'now' : '-' + (ago >= 60 ? ago / 60 + ' min' : ago + ' s'), x, top + ph + 4);
    }
  }
  function niceMax(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function renderTop(tr, p) {
    if (!tr.ok) {
      table($('pol-top'), [{ t: 'top consumers' }], [], detail(tr));
      table($('pol-util'), [{ t: 'utilisation' }], [], detail(tr));
      return;
    }
    const keys = tr.data.keys || [];
    table($('pol-top'), [{ t: '#', num: 1 }, { t: 'key' }, { t: 'share', num: 1 }, { t: 'cost', num: 1 }, { t: 'rejections', num: 1 }, { t: 'remaining' }],
      keys.map((k) => h('tr', { 'data-key': k.key_hash }, td(String(k.rank), 'rank', true), td(k.key !== undefined ? k.key : k.key_hash, 'key'),
        td(pct(k.share), 'share', true), td(String(k.cost), 'cost', true), td(String(k.rejections), 'rejections', true),
        td(Array.isArray(k.remaining) ? k.remaining.map((r) => r.window + ': ' + r.remaining + ' of ' + r.limit).join(', ') : '', 'remaining'))),
      'no traffic in the last ' + Math.round((tr.data.interval_ms || 0) / 1000) + ' s');
    const urows = [];
    for (const k of keys.slice(0, 5)) {
      if (!Array.isArray(k.remaining)) continue;
      for (const r of k.remaining) {
        const used = r.limit ? (r.limit - r.remaining) / r.limit : 0;
        urows.push(h('tr', null, td(k.key !== undefined ? k.key : k.key_hash, 'key'), td(r.window, 'window'),
          h('td', { 'data-col': 'util' }, h('span', { class: 'meter' }, meterFill(used)), ' ' + pct(used)),
          td(r.remaining + ' of ' + r.limit + ' left', 'left', true)));
      }
    }
    table($('pol-util'), [{ t: 'key (top 5)' }, { t: 'window' }, { t: 'used of the limit' }, { t: 'remaining', num: 1 }], urows,
      keys.length ? 'the store keeps no state here to read (remaining unknown)' : 'no traffic');
  }
  function meterFill(f) {
    const s = h('span', { class: f >= 0.8 ? 'hot' : null });
    s.style.width = Math.max(0, Math.min(100, f * 100)).toFixed(1) + '%'; // CSSOM, allowed by the CSP
    return s;
  }

  function ovrKind(o) {
    if (o.block) return 'block';
    if (o.exempt) return 'exempt';
    if (o.plan) return 'plan ' + o.plan;
    if (Array.isArray(o.limits)) return o.limits.map((l) => Object.entries(l).map(([k, v]) => k + ' ' + v).join(' ')).join('; ');
    return '';
  }
  function renderOverrides(ov) {
    if (overridesMissing(ov)) { table($('pol-ovr'), [{ t: 'overrides' }], [], OVR_MISSING); return; }
    if (!ov.ok) { table($('pol-ovr'), [{ t: 'overrides' }], [], detail(ov)); return; }
    const items = (ov.data && ov.data.items) || [];
    table($('pol-ovr'), [{ t: 'key' }, { t: 'label' }, { t: 'override' }, { t: 'expires' }, { t: 'reason' }, { t: 'set by' }],
      items.map((o) => h('tr', null, td(o.key !== undefined ? o.key : o.key_hash, 'key'), td(o.label || '', 'label'), td(ovrKind(o), 'kind'),
        td(o.expires_at || 'never', 'expires'), h('td', { class: 'wrap', text: o.reason || '' }), td(o.set_by || o.caller || '', 'by'))), 'no overrides');
  }

  // ---- Key ----------------------------------------------------------------------------------

  async function explainNamed() {
    const policy = $('key-policy').value, key = $('key-key').value;
    lastKey = { policy, key };
    const r = await api('/v1/explain', { method: 'POST', json: { policy, key } });
    await renderExplain(r, true);
  }
  async function explainAttrs() {
    let attrs;
    try { attrs = JSON.parse($('key-attrs').value || '{}'); } catch (e) {
      clear($('key-out')).appendChild(h('p', { class: 'error', text: 'not JSON: ' + e.message }));
      return;
    }
    lastKey = null;
    const r = await api('/v1/explain', { method: 'POST', json: attrs });
    await renderExplain(r, false);
  }

  async function renderExplain(r, named) {
    const out = clear($('key-out'));
    $('key-actions').hidden = !named || !r.ok;
    $('act-result').textContent = '';
    if (!r.ok) { out.appendChild(h('p', { class: 'error', text: detail(r) })); return; }
    const x = r.data;
    const ans = x.answer || {};
    const dec = ans.deciding || {};
    out.appendChild(h('div', { class: 'explain' },
      h('dl', { class: 'kv', id: 'key-answer' },
        h('dt', null, 'answer'), h('dd', { 'data-col': 'action', text: (ans.action || '') + ' (HTTP ' + (ans.status || '') + ')' }),
        h('dt', null, 'deciding window'), h('dd', { 'data-col': 'deciding', text: dec.policy ? dec.policy + ' ' + (dec.window || '') + ' — ' + (dec.rule || '') : 'none' }),
        h('dt', null, 'key'), h('dd', { 'data-col': 'key', text: named ? lastKey.key : '' }),
        h('dt', null, 'store'), h('dd', { text: x.store || '' }))));
    for (const p of x.policies || []) {
      const k = p.key || {};
      const keyText = k.missing ? 'missing (' + (k.when_missing || '') + ')' : (k.raw !== undefined ? k.raw + ' ' : '') + (k.hash || '') + (k.from ? ' — ' + k.from : '');
      const rows = (p.windows || []).map((w) => h('tr', { 'data-window': w.window }, td(w.window, 'window'), td(w.algorithm, 'alg'),
        td(String(w.limit), 'limit', true), td(String(w.remaining), 'remaining', true), td((w.reset_after_ms || 0) + ' ms', 'reset', true),
        td(w.would_admit ? 'admits' : 'refuses', 'admit', false, w.would_admit ? 'ok' : 'bad')));
      const t = h('table');
      table(t, [{ t: 'window' }, { t: 'algorithm' }, { t: 'limit', num: 1 }, { t: 'remaining', num: 1 }, { t: 'resets in', num: 1 }, { t: 'this request' }], rows, 'no windows');
      out.appendChild(h('div', { class: 'explain', 'data-policy': p.policy, 'data-matched': p.matched ? 'yes' : 'no' },
        h('h2', null, p.policy + ' — ' + (p.result || (p.matched ? 'matched' : 'not matched'))),
        h('dl', { class: 'kv' },
          h('dt', null, 'matched'), h('dd', { text: (p.matched ? 'yes: ' : 'no: ') + (p.why || '') }),
          h('dt', null, 'mode'), h('dd', { text: (p.mode || '') + (p.plan ? ', plan ' + p.plan : '') }),
          h('dt', null, 'composed key'), h('dd', { text: keyText }),
          h('dt', null, 'cost'), h('dd', { text: p.cost ? p.cost.units + ' (' + p.cost.from + ')' : '' }),
          p.override ? h('dt', null, 'override') : null,
          p.override ? h('dd', { 'data-col': 'override', text: ovrKind(p.override) + (p.override.label ? ' — ' + p.override.label : '') + (p.override.reason ? ' — ' + p.override.reason : '') }) : null),
        h('div', { class: 'scroll' }, t)));
    }
    if (named) {
      const o = await api('/v1/overrides/' + encodeURIComponent(lastKey.policy) + '/' + encodeURIComponent(lastKey.key));
      const txt = overridesMissing(o) ? OVR_MISSING : o.status === 404 ? 'none' : o.ok ? ovrKind(o.data) + (o.data.label ? ' — ' + o.data.label : '') +
        (o.data.expires_at ? ', until ' + o.data.expires_at : '') + (o.data.reason ? ' — ' + o.data.reason : '') : detail(o);
      out.appendChild(h('dl', { class: 'kv explain', id: 'key-override' }, h('dt', null, 'override'), h('dd', { 'data-col': 'override', text: txt })));
      const missing = overridesMissing(o);
      $('act-ovr-set').disabled = missing;
      $('act-ovr-rm').disabled = missing || o.status === 404;
    }
    if (role === 'read') {
      for (const id of ['act-reset', 'act-ovr-set', 'act-ovr-rm']) $(id).disabled = true;
      $('act-result').textContent = 'this token may only read (role: read): actions need a token of role act';
    }
  }

  // A dialog asking for a reason (and `fields`, inputs to add); resolves to null on cancel.
  function ask(title, fields) {
    return new Promise((resolve) => {
      const d = $('dlg');
      $('dlg-title').textContent = title;
      const body = clear($('dlg-body'));
      for (const f of fields || []) body.appendChild(f);
      $('dlg-reason').value = '';
      const done = () => {
        d.removeEventListener('close', done);
        resolve(d.returnValue === 'ok' ? $('dlg-reason').value : null);
      };
      d.returnValue = '';
      d.addEventListener('close', done);
      d.showModal();
      $('dlg-reason').focus();
    });
  }

  async function actReset() {
    if (!lastKey) return;
    const reason = await ask('Reset the counters of this key in ' + lastKey.policy, [h('p', { text: 'Key: ' + lastKey.key })]);
    if (reason === null) return;
    const r = await api('/v1/state/reset', { method: 'POST', json: { policy: lastKey.policy, key: lastKey.key, reason } });
    const msg = r.ok ? 'reset: ' + r.data.windows + ' window(s) forgotten' : 'reset refused: ' + detail(r);
    await explainNamed();
    $('act-result').textContent = msg;
  }

  async function actOverrideSet() {
    if (!lastKey) return;
    const kind = h('select', { id: 'ovr-kind' }, ['plan', 'limits', 'block', 'exempt'].map((k) => h('option', { value: k, text: k })));
    const value = h('input', { type: 'text', id: 'ovr-value', placeholder: 'plan name, or limits as JSON: [{"rate": "3000/min"}]' });
    const expires = h('input', { type: 'text', id: 'ovr-expires', placeholder: 'expires_at (RFC 3339, optional)' });
    const label = h('input', { type: 'text', id: 'ovr-label', placeholder: 'label (what you call this key, optional)' });
    const reason = await ask('Set an override for this key in ' + lastKey.policy, [h('p', { text: 'Key: ' + lastKey.key }), kind, value, expires, label]);
    if (reason === null) return;
    const body = { reason };
    if (kind.value === 'plan') body.plan = value.value;
    else if (kind.value === 'limits') {
      try { body.limits = JSON.parse(value.value); } catch (e) { $('act-result').textContent = 'limits: not JSON: ' + e.message; return; }
    } else body[kind.value] = true;
    if (expires.value) body.expires_at = expires.value;
    if (label.value) body.label = label.value;
    const r = await api('/v1/overrides/' + encodeURIComponent(lastKey.policy) + '/' + encodeURIComponent(lastKey.key), { method: 'PUT', json: body });
    const msg = overridesMissing(r) ? OVR_MISSING : r.ok ? 'override set' : 'override refused: ' + detail(r);
    await explainNamed();
    $('act-result').textContent = msg;
  }

  async function actOverrideRemove() {
    if (!lastKey) return;
    const reason = await ask('Remove the override of this key in ' + lastKey.policy, [h('p', { text: 'Key: ' + lastKey.key })]);
    if (reason === null) return;
    const r = await api('/v1/overrides/' + encodeURIComponent(lastKey.policy) + '/' + encodeURIComponent(lastKey.key) + '?reason=' + encodeURIComponent(reason),
      { method: 'DELETE', json: { reason } });
    const msg = overridesMissing(r) ? OVR_MISSING : r.ok ? 'override removed' : 'removal refused: ' + detail(r);
    await explainNamed();
    $('act-result').textContent = msg;
  }

  // ---- Changes ------------------------------------------------------------------------------

  function configSummary(e) {
    const parts = [];
    if (e.added && e.added.length) parts.push('added ' + e.added.join(', '));
    if (e.removed && e.removed.length) parts.push('removed ' + e.removed.join(', '));
    for (const c of e.changed || []) parts.push(c.policy + ': ' + c.how);
    if (e.error) parts.push(e.error);
    return parts.join('; ') || 'no policy changed';
  }
  function auditWhat(e) {
    if (e.source === 'override') return (e.changed || []).map((c) => c.policy + ': ' + c.how).join('; ');
    if (e.action) {
      const parts = [e.action, e.policy, e.key].filter(Boolean).join(' ');
      return parts + (e.detail ? ' — ' + e.detail : '') + (e.before !== undefined || e.after !== undefined ? ' — ' + JSON.stringify({ before: e.before, after: e.after }) : '');
    }
    return 'config ' + (e.generation !== undefined ? 'generation ' + e.generation + ': ' : '') + configSummary(e);
  }

  // "file:12" as ":12" under a policy of the same file
  function sameFile(ps, ws) {
    const f = (x) => String(x || '').replace(/:\d+$/, '');
    return ws && f(ps) === f(ws) ? 'line ' + String(ws).replace(/^.*:/, '') : ws || '';
  }

  async function renderChanges() {
    const au = await api('/v1/audit?n=200');
    const entries = au.ok ? au.data.entries : [];
    table($('ch-audit'), [{ t: 'when' }, { t: 'who' }, { t: 'source' }, { t: 'what' }, { t: 'reason' }, { t: 'outcome' }],
      entries.map((e) => h('tr', { 'data-action': e.action || (e.source === 'override' ? 'override' : 'config') }, td(shortTs(e.ts), 'ts'), td(e.caller || '—', 'caller'), td(e.source, 'source'),
        h('td', { class: 'wrap', 'data-col': 'what', text: auditWhat(e) }), h('td', { class: 'wrap', 'data-col': 'reason', text: e.reason || '' }),
        td(e.outcome, 'outcome', false, e.outcome === 'ok' ? 'ok' : 'bad'))), au.ok ? 'no entries' : detail(au));
    const rows = [];
    for (const p of policies) {
      rows.push(h('tr', { 'data-policy': p.name }, td(p.name, 'policy'), td(p.source || '', 'source'), td(modeOf(p)[0], 'mode'),
        td(p.algorithm || '', 'alg'), h('td', { class: 'wrap', text: (p.windows || []).map((w) => w.window + (w.burst ? ' burst ' + w.burst : '') + ' ' + sameFile(p.source, w.source)).join('; ') })));
    }
    table($('ch-config'), [{ t: 'policy' }, { t: 'file:line' }, { t: 'mode' }, { t: 'algorithm' }, { t: 'windows (where)' }], rows, 'no policies');
  }

  async function checkConfig() {
    const out = clear($('ch-result'));
    const r = await api('/v1/config/check', { method: 'POST', json: { yaml: $('ch-yaml').value } });
    if (!r.ok) { out.appendChild(h('p', { class: 'error', text: detail(r) })); return; }
    const d = r.data;
    out.appendChild(h('p', { id: 'ch-verdict', class: d.valid ? 'ok' : 'bad', text: d.valid ? 'valid: ' + d.policies + ' polic' + (d.policies === 1 ? 'y' : 'ies') : d.errors.length + ' error(s)' }));
    const list = h('ul', { class: 'diag' });
    for (const e of d.errors) list.appendChild(h('li', { class: 'bad', text: e.line + ':' + e.col + ': ' + e.message }));
    for (const e of d.warnings) list.appendChild(h('li', { text: e.line + ':' + e.col + ': warning: ' + e.message }));
    out.appendChild(list);
  }

  boot();
})();
