'use strict';
// The chat page: streams replies from the public /api/chat (NDJSON), thinking apart from the answer, with the
// request's timings (as the PERF line has them) under each reply. Images, picked or dropped on the chat, go with
// the next message as its base64 images (what Ollama's API takes) for a model whose /api/show lists vision.

const $ = (s) => document.querySelector(s);
let messages = [];
let ctrl = null;
let pending = []; // images for the next message: {name, data (base64), url (data URL, for the thumbnail)}
let vision = false; // the chosen model reads images

// The server's limits (docs/api.md): 16 images a request; the formats it decodes.
const maxImages = 16;
const imageTypes = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];

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

async function checkVision() {
  const model = $('#model').value;
  vision = false;
  try {
    const r = await fetch('/api/show', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model }) });
    if (r.ok) vision = ((await r.json()).capabilities || []).includes('vision');
  } catch (e) { /* the model's answer will say */ }
  if (model !== $('#model').value) return; // chosen again meanwhile
  $('#image').disabled = !vision;
  $('#attach').classList.toggle('disabled', !vision);
  note(vision || !model ? '' : model + ' reads text only: it takes no images.');
}

function note(text) {
  $('#imagenote').textContent = text;
  $('#imagenote').hidden = !text;
}

function imagesInHistory() {
  return messages.reduce((n, m) => n + (m.images ? m.images.length : 0), 0);
}

// addImages reads files as base64 for the next message, refusing what the server would.
async function addImages(files) {
  for (const f of files) {
    if (!vision) { note($('#model').value + ' reads text only: it takes no images.'); return; }
    if (!imageTypes.includes(f.type)) { note(`${f.name}: not an image mlxg reads (PNG, JPEG, GIF or WebP)`); continue; }
    if (pending.length + imagesInHistory() >= maxImages) { note(`at most ${maxImages} images in a conversation`); return; }
    const url = await new Promise((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => resolve(r.result);
      r.onerror = () => reject(r.error);
      r.readAsDataURL(f);
    });
    pending.push({ name: f.name, url, data: url.slice(url.indexOf(',') + 1) });
    note('');
  }
  showPending();
}

function thumb(url, name) {
  return el('img', { className: 'thumb', src: url, alt: name, title: name });
}

function showPending() {
  $('#attachments').replaceChildren(...pending.map((p, i) => {
    const x = el('button', { type: 'button', className: 'remove', textContent: '×', title: 'Remove ' + p.name });
    x.addEventListener('click', () => { pending.splice(i, 1); showPending(); });
    return el('span', { className: 'attachment' }, thumb(p.url, p.name), x);
  }));
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

async function send(text, images) {
  const model = $('#model').value;
  const log = $('#log');
  const user = el('div', { className: 'msg user' });
  if (images.length) user.append(el('div', { className: 'images' }, ...images.map((p) => thumb(p.url, p.name))));
  user.append(text);
  log.append(user);
  const m = { role: 'user', content: text };
  if (images.length) m.images = images.map((p) => p.data);
  messages.push(m);
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
  if ((!t && !pending.length) || ctrl) return;
  $('#prompt').value = '';
  const images = pending;
  pending = [];
  showPending();
  send(t, images);
});
$('#image').addEventListener('change', async (e) => {
  await addImages([...e.target.files]);
  e.target.value = ''; // the same file may be picked again
});
// Drag and drop: anywhere on the conversation and the message box.
const drop = $('#drop');
drop.addEventListener('dragover', (e) => {
  if (![...e.dataTransfer.types].includes('Files')) return;
  e.preventDefault();
  e.dataTransfer.dropEffect = 'copy';
  drop.classList.add('dragging');
});
drop.addEventListener('dragleave', (e) => { if (!drop.contains(e.relatedTarget)) drop.classList.remove('dragging'); });
drop.addEventListener('drop', (e) => {
  drop.classList.remove('dragging');
  if (!e.dataTransfer.files.length) return;
  e.preventDefault();
  addImages([...e.dataTransfer.files]);
});
$('#model').addEventListener('change', checkVision);
$('#prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('#send').requestSubmit(); }
});
$('#stop').addEventListener('click', () => { if (ctrl) ctrl.abort(); });
$('#clear').addEventListener('click', () => { messages = []; pending = []; showPending(); note(''); $('#log').replaceChildren(); });
loadModels().then(checkVision);
