// ollama create and the drop-in checks through the real, unmodified ollama-js (npm "ollama") against a
// running `mlxg serve` with the scripted test model (api/apitest): /api/create FROM a model with
// parameters, system, messages and license (whole and streamed), /api/show reporting them, chat following
// them, TEMPLATE refused, and /api/version in Ollama's numbering. e2e/node_create_test.go runs it with
// MLXG_URL, MLXG_NODE_MODULES and MLXG_MODEL. Exits non-zero on the first failed check.
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const { Ollama } = require(path.join(nm, 'ollama'));

async function main() {
  const ollama = new Ollama({ host: base });

  const v = await ollama.version();
  assert.equal(v.version, '0.33.0', 'version');
  assert.ok(v.mlxg_version, 'mlxg_version');

  const done = await ollama.create({
    model: 'js-derived', from: model, stream: false,
    parameters: { num_ctx: 2048, stop: ['sunny'] }, system: 'Be terse.',
    messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' }], license: 'MIT-0',
  });
  assert.equal(done.status, 'success', 'create, whole');

  const statuses = [];
  for await (const p of await ollama.create({ model: 'js-derived2', from: 'js-derived', parameters: { stop: ['Paris'] }, stream: true })) {
    statuses.push(p.status);
  }
  assert.equal(statuses.at(-1), 'success', 'create, streamed: ' + statuses.join(', '));

  const show = await ollama.show({ model: 'js-derived' });
  assert.match(show.parameters, /num_ctx\s+2048/);
  assert.match(show.parameters, /stop\s+"sunny"/);
  assert.equal(show.system, 'Be terse.');
  assert.equal(show.messages.length, 2);
  assert.match(show.license, /MIT-0/);
  for (const c of ['completion', 'tools', 'thinking']) assert.ok(show.capabilities.includes(c), 'capability ' + c);

  let chat = await ollama.chat({ model: 'js-derived', think: false, messages: [{ role: 'user', content: 'Weather?' }] });
  assert.equal(chat.message.content, 'The weather in Paris is ', 'the created model\'s stop word');
  chat = await ollama.chat({ model: 'js-derived2', think: false, messages: [{ role: 'user', content: 'Weather?' }] });
  assert.equal(chat.message.content, 'The weather in ', 'FROM a created model, its own stop word');
  const gen = await ollama.generate({ model: 'js-derived', think: false, prompt: 'Weather?' });
  assert.equal(gen.response, 'The weather in Paris is ', 'generate on the created model');

  await assert.rejects(ollama.create({ model: 'js-bad', from: model, template: '{{ .Prompt }}', stream: false }),
    (e) => e.status_code === 400 && /TEMPLATE is not supported/.test(e.error), 'TEMPLATE refused');
  await assert.rejects(ollama.create({ model: 'js-bad', from: model, parameters: { num_gpus: 1 }, stream: false }),
    (e) => e.status_code === 400 && /unknown parameter/.test(e.error), 'unknown parameter refused');

  for (const m of ['js-derived2', 'js-derived']) await ollama.delete({ model: m });
  const list = await ollama.list();
  assert.ok(!list.models.some((m) => m.name.startsWith('js-derived')), 'deleted');
  assert.ok(list.models.some((m) => m.name === model + ':latest'), 'the FROM model stays');
  console.log('ollama-js create: ok');
}

main().catch((e) => { console.error(e); process.exit(1); });
