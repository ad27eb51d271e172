'use strict';
// The dashboard: one /api/status snapshot a second from /api/status/events, drawn into the page.

const $ = (s) => document.querySelector(s);
const memHistory = []; // {t, weights, kv, prefix, used, total}
const maxHistory = 300;

function bytes(n) {
  if (n === undefined || n === null) return '-';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Math.abs(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (n < 0 ? '-' : '') + (i ? v.toFixed(1) : v) + ' ' + u[i];
}
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  for (const k of kids) e.append(k);
  return e;
}
function stat(label, value, cls) {
  return el('div', { className: 'stat ' + (cls || '') }, el('span', { className: 'label', textContent: label }), el('span', { className: 'value', textContent: value }));
}
function until(t, forever) {
  if (forever) return 'never';
  const s = Math.round((new Date(t) - Date.now()) / 1000);
  if (s <= 0) return 'now';
  return s < 120 ? s + ' s' : Math.round(s / 60) + ' min';
}

async function unload(name, btn) {
  btn.disabled = true;
  btn.textContent = 'unloading…';
  try {
    const r = await fetch('/api/generate', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: name, keep_alive: 0 }) });
    if (!r.ok) throw new Error((await r.json()).error || r.statusText);
  } catch (e) {
    btn.textContent = 'failed: ' + e.message;
  }
}

const num = (n) => (n || 0).toLocaleString('en-US');

// The context as chosen (its length, and why in small print) and as used by the model's latest request:
// the tokens its KV cache held against the context, what was cut to fit, the KV bytes running sequences
// hold now, and the prompt tokens the prefix cache restored.
function contextCells(m) {
  const chosen = el('td', { className: 'context' }, el('span', { className: 'ctxlen', textContent: num(m.context_length) }));
  if (m.context_reason) {
    chosen.title = m.context_reason;
    chosen.append(el('span', { className: 'ctxreason', textContent: m.context_reason }));
  }
  const u = m.context_used;
  const used = el('td', { className: 'used' });
  const restored = el('td', { className: 'restored' });
  if (u) {
    const share = m.context_length ? Math.min(100, 100 * u.tokens / m.context_length) : 0;
    const meter = el('span', { className: 'meter' }, el('span'));
    meter.firstChild.style.width = share.toFixed(1) + '%';
    used.append(meter, `${num(u.tokens)} tokens (${share < 1 && u.tokens ? '<1' : share.toFixed(0)}%) · KV ${bytes(u.kv_bytes)}`);
    if (u.truncated || u.messages_dropped) {
      used.append(el('span', { className: 'cut', textContent: ` · cut ${num(u.truncated)} tokens` + (u.messages_dropped ? `, ${u.messages_dropped} messages` : '') }));
    }
    used.dataset.tokens = u.tokens;
    restored.textContent = u.restored ? `${num(u.restored)} tokens` : '0';
    restored.dataset.tokens = u.restored;
  } else {
    used.textContent = '-';
    restored.textContent = '-';
  }
  const held = el('td', { className: 'held', textContent: bytes(m.kv_held || 0) });
  held.dataset.bytes = m.kv_held || 0;
  return [chosen, used, held, restored];
}

function drawModels(st) {
  const tb = $('#models tbody');
  tb.replaceChildren();
  $('#no-models').hidden = st.models.length > 0;
  for (const m of st.models) {
    const b = el('button', { className: 'unload', textContent: 'Unload' });
    b.dataset.model = m.name;
    b.addEventListener('click', () => unload(m.name, b));
    const tr = el('tr', {}, el('td', { textContent: m.name }), el('td', { textContent: m.backend || '-' }), el('td', { textContent: bytes(m.size) }),
      ...contextCells(m), el('td', { textContent: m.kv_cache || '-' }), el('td', { textContent: m.active }),
      el('td', { textContent: until(m.expires_at, m.forever) }), el('td', {}, b));
    tr.dataset.model = m.name;
    tb.append(tr);
  }
}

// The parts of memory, bottom to top in the chart and left to right in the bar: what mlxg holds (weights,
// the KV of running sequences, the prefix cache's RAM tier), what other programs use, and what is available.
const memParts = [
  ['weights', 'weights'], ['kv', 'KV held'], ['prefix', 'prefix cache (RAM)'], ['other', 'used by others'], ['free', 'available'],
];

function memSplit(m) {
  const total = m.total || 0;
  const weights = m.weights || 0, kv = m.kv_held || 0, prefix = m.prefix_cache || 0;
  const used = Math.max(0, total - (m.available || 0));
  const other = Math.max(0, used - weights - kv - prefix);
  return { weights, kv, prefix, other, free: Math.max(0, total - weights - kv - prefix - other), total };
}

function drawMemory(st) {
  const m = st.memory;
  const box = $('#memory');
  box.replaceChildren();
  if (m.error) { box.append(stat('memory', m.error)); return; }
  box.append(stat('total', bytes(m.total)), stat('available', bytes(m.available)), stat('pressure', m.pressure, 'pressure-' + m.pressure),
    stat('weights', bytes(m.weights)), stat('KV held', bytes(m.kv_held)), stat('KV at context', bytes(m.kv)),
    stat('prefix cache', `${bytes(m.prefix_cache)} RAM · ${bytes(m.prefix_ssd)} SSD`), stat('swap used', bytes(m.swap_used)));
  const parts = memSplit(m);
  // Now: one bar across the machine's memory, each part as wide as its share (a part too small to see
  // keeps a sliver, so that it is never missing), labelled where it is wide enough.
  const bar = $('#membar');
  bar.replaceChildren();
  const legend = $('#memlegend');
  legend.replaceChildren();
  if (parts.total) {
    for (const [key, label] of memParts) {
      const v = parts[key];
      const share = 100 * v / parts.total;
      const seg = el('div', { className: 'seg part-' + key, title: `${label}: ${bytes(v)} (${share.toFixed(1)}%)` });
      seg.dataset.part = key;
      seg.dataset.bytes = v;
      seg.style.width = share.toFixed(3) + '%';
      seg.style.minWidth = v > 0 ? '3px' : '0';
      seg.style.flexShrink = key === 'free' || key === 'other' ? '1' : '0';
      if (share >= 8) seg.textContent = `${label} ${bytes(v)}`;
      bar.append(seg);
      legend.append(el('span', { className: 'item' }, el('span', { className: 'sw part-' + key }), `${label} ${bytes(v)} (${share < 0.1 && v ? '<0.1' : share.toFixed(1)}%)`));
    }
  }
  // What mlxg holds, at its own scale (a small model is a sliver of a large machine): the same parts,
  // and the prefix cache's SSD tier beside them (on disk, not in memory).
  const held = parts.weights + parts.kv + parts.prefix;
  const mb = $('#mlxgbar');
  mb.replaceChildren();
  const ml = $('#mlxglegend');
  ml.replaceChildren();
  if (held > 0) {
    for (const [key, label] of memParts.slice(0, 3)) {
      const v = parts[key];
      const share = 100 * v / held;
      const seg = el('div', { className: 'seg part-' + key, title: `${label}: ${bytes(v)} (${share.toFixed(1)}% of what mlxg holds)` });
      seg.dataset.part = key;
      seg.dataset.bytes = v;
      seg.style.width = share.toFixed(3) + '%';
      seg.style.minWidth = v > 0 ? '3px' : '0';
      if (share >= 12) seg.textContent = `${label} ${bytes(v)}`;
      mb.append(seg);
    }
    ml.append(el('span', { className: 'item' }, `mlxg holds ${bytes(held)} (${(100 * held / (parts.total || 1)).toFixed(1)}% of memory): weights ${bytes(parts.weights)}, KV ${bytes(parts.kv)} (the plans allow ${bytes(m.kv)} at their contexts), prefix cache ${bytes(parts.prefix)} in RAM and ${bytes(m.prefix_ssd || 0)} on SSD`));
  }
  mb.hidden = held <= 0;
  memHistory.push({ t: Date.now(), ...parts });
  if (memHistory.length > maxHistory) memHistory.shift();
  drawMemChart();
}

// Over time: the parts stacked, against the machine's memory on a labelled axis; the samples held span the
// width (the oldest at the left), so that the first seconds fill the chart rather than a sliver.
function drawMemChart() {
  const c = $('#memchart');
  const ctx = c.getContext('2d');
  const w = c.width, h = c.height;
  const left = 64, bottom = 18, top = 6, right = 8;
  ctx.clearRect(0, 0, w, h);
  const last = memHistory[memHistory.length - 1];
  if (!last || !last.total) return;
  const total = last.total;
  const pw = w - left - right, ph = h - top - bottom;
  const n = memHistory.length;
  const x = (i) => left + (n === 1 ? pw : (i / (n - 1)) * pw);
  const y = (v) => top + ph - (v / total) * ph;
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = '#6b7280';
  ctx.strokeStyle = '#e3e6ea';
  ctx.lineWidth = 1;
  for (let k = 0; k <= 4; k++) {
    const v = (total * k) / 4;
    ctx.beginPath();
    ctx.moveTo(left, y(v));
    ctx.lineTo(w - right, y(v));
    ctx.stroke();
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    ctx.fillText(bytes(v), left - 6, y(v));
  }
  const secs = Math.round((last.t - memHistory[0].t) / 1000);
  ctx.textBaseline = 'top';
  ctx.textAlign = 'left';
  ctx.fillText(secs ? `${secs} s ago` : '', left, h - bottom + 4);
  ctx.textAlign = 'right';
  ctx.fillText('now', w - right, h - bottom + 4);
  const colors = { weights: '#d9822b', kv: '#8a5cc7', prefix: '#3a9d5d', other: '#a9b8cc' };
  let base = memHistory.map(() => 0);
  for (const key of ['weights', 'kv', 'prefix', 'other']) {
    const upper = memHistory.map((p, i) => base[i] + p[key]);
    ctx.beginPath();
    if (n === 1) {
      ctx.rect(left, y(upper[0]), pw, y(base[0]) - y(upper[0]));
    } else {
      upper.forEach((v, i) => (i ? ctx.lineTo(x(i), y(v)) : ctx.moveTo(x(i), y(v))));
      for (let i = n - 1; i >= 0; i--) ctx.lineTo(x(i), y(base[i]));
      ctx.closePath();
    }
    ctx.fillStyle = colors[key];
    ctx.fill();
    base = upper;
  }
}

// One bar per layer: its height is the bytes a token takes there, its label the K/V bits as /api/ps spells them.
function drawPlans(st) {
  const box = $('#plans');
  box.replaceChildren();
  for (const m of st.models) {
    const p = m.kv_plan;
    const card = el('div', { className: 'plan' });
    card.dataset.model = m.name;
    card.append(el('h3', { textContent: m.name }));
    if (!p) { card.append(el('p', { className: 'muted', textContent: 'no KV plan (the server runs without a KV policy)' })); box.append(card); continue; }
    card.append(el('p', {}, el('code', { textContent: p.layout })),
      el('p', { className: 'muted', textContent: `${bytes(p.token_bytes)} per token · context ${p.context} (fits ${p.fit_context}) · KV ${bytes(p.kv_bytes)} · weights ${bytes(p.weights)}` + (p.context_reason ? ` · ${p.context_reason}` : '') }));
    const maxB = Math.max(1, ...p.layers.map((l) => l.token_bytes || 0));
    const bars = el('div', { className: 'bars' });
    for (const l of p.layers) {
      const kv = l.k_bits ? `K${l.k_bits}/V${l.v_bits}` : l.kind;
      const bar = el('div', { className: 'bar kind-' + l.kind + (l.boundary ? ' boundary' : '') + (l.k_bits ? ' k' + l.k_bits : '') });
      bar.title = `layer ${l.layer}: ${l.kind}` + (l.k_bits ? `, K ${l.k_bits} bits${l.k_group ? ' g' + l.k_group : ''}, V ${l.v_bits} bits${l.v_group ? ' g' + l.v_group : ''}, ${l.token_bytes} B/token` : '') + (l.boundary ? ', boundary' : '');
      bar.dataset.layer = l.layer;
      bar.dataset.kv = kv;
      const fill = el('div', { className: 'fill' });
      fill.style.height = Math.max(4, 100 * (l.token_bytes || 0) / maxB) + '%';
      bar.append(fill, el('span', { className: 'bits', textContent: kv }));
      bars.append(bar);
    }
    card.append(bars);
    box.append(card);
  }
  if (!st.models.length) box.append(el('p', { className: 'muted', textContent: 'Load a model to see its plan.' }));
}

function drawPrefix(st) {
  const box = $('#prefix');
  box.replaceChildren();
  const p = st.prefix_cache;
  if (!p) { box.append(el('p', { className: 'muted', textContent: 'off' })); return; }
  const hits = p.ram_hits + p.ssd_hits;
  box.append(stat('RAM', `${p.ram_blocks} blocks, ${bytes(p.ram_bytes)}`), stat('SSD', `${p.ssd_blocks} blocks, ${bytes(p.ssd_bytes)}`),
    stat('hits', `${hits} (RAM ${p.ram_hits}, SSD ${p.ssd_hits})`), stat('misses', `${p.misses} of ${p.lookups} lookups`));
}

function drawThroughput(st) {
  const t = st.throughput;
  $('#throughput').replaceChildren(stat('prefill', t.prefill_tps.toFixed(1) + ' tok/s'), stat('decode', t.decode_tps.toFixed(1) + ' tok/s'),
    stat('time to first token', t.ttft_seconds.toFixed(2) + ' s'), stat('requests', t.requests), stat('active', t.active), stat('queued', t.queued));
}

function drawRequests(st) {
  const tb = $('#requests tbody');
  tb.replaceChildren();
  for (const r of st.requests.slice(0, 20)) {
    const tr = el('tr', {}, el('td', { textContent: new Date(r.time).toLocaleTimeString() }), el('td', { textContent: r.model }),
      el('td', { textContent: r.prompt_tokens }), el('td', { textContent: r.eval_tokens }),
      el('td', { textContent: r.prefill_s > 0 ? (r.prompt_tokens / r.prefill_s).toFixed(1) : '-' }),
      el('td', { textContent: r.decode_s > 0 ? (r.eval_tokens / r.decode_s).toFixed(1) : '-' }), el('td', { textContent: r.done }));
    tb.append(tr, el('tr', { className: 'perf' }, el('td', { colSpan: 7 }, el('code', { textContent: r.perf }))));
  }
}

function draw(st) {
  drawModels(st);
  drawMemory(st);
  drawPlans(st);
  drawPrefix(st);
  drawThroughput(st);
  drawRequests(st);
  $('#conn').textContent = 'live · mlxg ' + (st.version || '');
}

function connect() {
  const es = new EventSource('/api/status/events');
  es.addEventListener('status', (e) => draw(JSON.parse(e.data)));
  es.onerror = () => { $('#conn').textContent = 'reconnecting…'; };
}

connect();
