'use strict';
// The chat page: streams replies from the public /api/chat (NDJSON), thinking apart from the answer, with the
// request's timings (as the PERF line has them) under each reply.

const $ = (s) => document.querySelector(s);
let messages = [];
let ctrl = null;

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  for (const k of kids) e.append(k);
  return e;
}

async function loadModels() {
  const sel = $('#model');
  try {
    const r = await fetch('/api/tags');
    const { models } = await r.json();
    const ps = await (await fetch('/api/ps')).json();
    const loaded = new Set((ps.models || []).map((m) => m.name));
    sel.replaceChildren(...models.map((m) => el('option', { value: m.name, textContent: m.name + (loaded.has(m.name) ? ' (loaded)' : '') })));
    const first = models.find((m) => loaded.has(m.name));
    if (first) sel.value = first.name;
  } catch (e) {
    sel.replaceChildren(el('option', { textContent: 'cannot list models: ' + e.message }));
  }
}

function options() {
  const o = {};
  for (const k of ['temperature', 'num_predict', 'num_ctx', 'seed']) {
    const v = $('#' + k).value;
    if (v !== '') o[k] = Number(v);
  }
  return o;
}

function perfLine(d) {
  const s = (ns) => (ns || 0) / 1e9;
  const rate = (n, ns) => (ns > 0 ? (n / s(ns)).toFixed(1) : '0');
  return `PERF: model=${d.model} prompt_tok=${d.prompt_eval_count || 0} gen_tok=${d.eval_count || 0} prefill_s=${s(d.prompt_eval_duration).toFixed(3)} ` +
    `prompt_tps=${rate(d.prompt_eval_count || 0, d.prompt_eval_duration)} gen_tps=${rate(d.eval_count || 0, d.eval_duration)} ` +
    `decode_s=${s(d.eval_duration).toFixed(3)} load_s=${s(d.load_duration).toFixed(3)} total_s=${s(d.total_duration).toFixed(3)} done=${d.done_reason || ''}`;
}

function busy(on) {
  $('#go').disabled = on;
  $('#stop').disabled = !on;
}

async function send(text) {
  const model = $('#model').value;
  const log = $('#log');
  log.append(el('div', { className: 'msg user', textContent: text }));
  messages.push({ role: 'user', content: text });
  const thinking = el('div', { className: 'thinking' });
  thinking.hidden = true;
  const content = el('div', { className: 'content' });
  const perf = el('div', { className: 'perf' });
  const box = el('div', { className: 'msg assistant' }, thinking, content, perf);
  log.append(box);
  const sys = $('#system').value.trim();
  const body = { model, messages: (sys ? [{ role: 'system', content: sys }] : []).concat(messages), stream: true, options: options() };
  if ($('#think').checked) body.think = true;
  ctrl = new AbortController();
  busy(true);
  let answer = '';
  try {
    const r = await fetch('/api/chat', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal: ctrl.signal });
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error || r.statusText);
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (!line) continue;
        const d = JSON.parse(line);
        if (d.error) throw new Error(d.error);
        if (d.message && d.message.thinking) { thinking.hidden = false; thinking.textContent += d.message.thinking; }
        if (d.message && d.message.content) { answer += d.message.content; content.textContent = answer; }
        if (d.done) perf.textContent = perfLine(d);
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') perf.textContent = 'stopped';
    else content.append(el('div', { className: 'error', textContent: e.message }));
  } finally {
    box.dataset.done = '1';
    busy(false);
    ctrl = null;
    messages.push({ role: 'assistant', content: answer });
  }
}

$('#send').addEventListener('submit', (e) => {
  e.preventDefault();
  const t = $('#prompt').value.trim();
  if (!t || ctrl) return;
  $('#prompt').value = '';
  send(t);
});
$('#prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('#send').requestSubmit(); }
});
$('#stop').addEventListener('click', () => { if (ctrl) ctrl.abort(); });
$('#clear').addEventListener('click', () => { messages = []; $('#log').replaceChildren(); });
loadModels();
