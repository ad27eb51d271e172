'use strict';
// The dashboard: one /api/status snapshot a second from /api/status/events, drawn into the page.

const $ = (s) => document.querySelector(s);
const memHistory = []; // {t, used, models, prefix, total}
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

function drawModels(st) {
  const tb = $('#models tbody');
  tb.replaceChildren();
  $('#no-models').hidden = st.models.length > 0;
  for (const m of st.models) {
    const b = el('button', { className: 'unload', textContent: 'Unload' });
    b.dataset.model = m.name;
    b.addEventListener('click', () => unload(m.name, b));
    tb.append(el('tr', {}, el('td', { textContent: m.name }), el('td', { textContent: m.backend || '-' }), el('td', { textContent: bytes(m.size) }),
      el('td', { textContent: m.context_length }), el('td', { textContent: m.kv_cache || '-' }), el('td', { textContent: m.active }),
      el('td', { textContent: until(m.expires_at, m.forever) }), el('td', {}, b)));
  }
}

function drawMemory(st) {
  const m = st.memory;
  const box = $('#memory');
  box.replaceChildren();
  if (m.error) { box.append(stat('memory', m.error)); return; }
  box.append(stat('total', bytes(m.total)), stat('available', bytes(m.available)), stat('pressure', m.pressure, 'pressure-' + m.pressure),
    stat('weights', bytes(m.weights)), stat('KV cache', bytes(m.kv)), stat('prefix cache', bytes(m.prefix_cache)),
    stat('swap used', bytes(m.swap_used)));
  memHistory.push({ t: Date.now(), used: m.total - m.available, models: m.weights + m.kv, prefix: m.prefix_cache, total: m.total });
  if (memHistory.length > maxHistory) memHistory.shift();
  const c = $('#memchart');
  const ctx = c.getContext('2d');
  const w = c.width, h = c.height;
  ctx.clearRect(0, 0, w, h);
  if (!m.total) return;
  // The newest sample at the right edge; at least a minute across, so the first seconds are more than a sliver.
  const span = Math.min(maxHistory, Math.max(60, memHistory.length)) - 1;
  const x = (i) => w - (memHistory.length - 1 - i) * (w / span);
  const y = (v) => h - (v / m.total) * h;
  const line = (key, color, fill) => {
    ctx.beginPath();
    memHistory.forEach((p, i) => (i ? ctx.lineTo(x(i), y(p[key])) : ctx.moveTo(x(i), y(p[key]))));
    if (fill) { ctx.lineTo(x(memHistory.length - 1), h); ctx.lineTo(x(0), h); ctx.closePath(); ctx.fillStyle = color; ctx.fill(); } else { ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.stroke(); }
  };
  line('used', 'rgba(90,140,220,0.35)', true);
  line('models', '#d9822b', false);
  line('prefix', '#3a9d5d', false);
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
      el('p', { className: 'muted', textContent: `${bytes(p.token_bytes)} per token · context ${p.context} (fits ${p.fit_context}) · KV ${bytes(p.kv_bytes)} · weights ${bytes(p.weights)}` }));
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
