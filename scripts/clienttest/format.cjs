// Structured outputs through real, unmodified npm clients: ollama-js (npm "ollama", format) and openai-node
// (npm "openai", response_format json_schema and json_object), against a running `mlxg serve` with the scripted
// test model (api/apitest), whose answer would be a tool call or prose: under a schema it becomes JSON of the
// schema, with the thinking block left as scripted. e2e/node_format_test.go runs it with MLXG_URL,
// MLXG_NODE_MODULES and MLXG_MODEL. Exits non-zero on the first failed check.
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const { Ollama } = require(path.join(nm, 'ollama'));
const OpenAI = require(path.join(nm, 'openai')).default;

const schema = {
  type: 'object',
  properties: { city: { enum: ['Paris', 'Rome'] }, sunny: { type: 'boolean' } },
  required: ['city', 'sunny'],
  additionalProperties: false,
};

function checkCity(text, where) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ['city', 'sunny'], where + ': keys of ' + text);
  assert.ok(v.city === 'Paris' || v.city === 'Rome', where + ': city ' + v.city);
  assert.equal(typeof v.sunny, 'boolean', where + ': sunny');
}

async function ollamaJS() {
  const ollama = new Ollama({ host: base });
  let content = '', thinking = '';
  for await (const part of await ollama.chat({ model, stream: true, format: schema, messages: [{ role: 'user', content: 'Weather in Paris?' }] })) {
    content += part.message.content;
    thinking += part.message.thinking || '';
    assert.ok(!part.message.tool_calls || part.message.tool_calls.length === 0, 'no tool call under format');
  }
  assert.equal(thinking, 'Weather needs a tool');
  checkCity(content, 'ollama-js chat');
  const gen = await ollama.generate({ model, prompt: 'Weather?', think: false, format: schema, stream: false });
  checkCity(gen.response, 'ollama-js generate');
  await assert.rejects(ollama.generate({ model, prompt: 'hi', format: { type: 'string', format: 'email' }, stream: false }), (err) => {
    assert.equal(err.status_code, 400);
    assert.match(err.error, /string format "email" is not supported/);
    return true;
  });
  console.log('ollama-js format: ok');
}

async function openaiNode() {
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'mlxg', maxRetries: 0 });
  const rf = { type: 'json_schema', json_schema: { name: 'weather', strict: true, schema } };
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], response_format: rf });
  checkCity(r.choices[0].message.content, 'openai-node');
  assert.equal(r.choices[0].finish_reason, 'stop');
  let text = '';
  const stream = await client.chat.completions.create({ model, stream: true, reasoning_effort: 'none', messages: [{ role: 'user', content: 'Weather?' }], response_format: rf });
  for await (const chunk of stream) {
    text += (chunk.choices[0] && chunk.choices[0].delta.content) || '';
  }
  checkCity(text, 'openai-node stream');
  const obj = await client.chat.completions.create({ model, max_tokens: 20, messages: [{ role: 'user', content: 'Weather?' }], response_format: { type: 'json_object' } });
  assert.ok(obj.choices[0].message.content.trim().startsWith('{'), 'json_object: ' + obj.choices[0].message.content);
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: {} } } } }), (err) => {
    assert.equal(err.status, 400);
    assert.match(err.message, /patternProperties/);
    return true;
  });
  console.log('openai-node response_format: ok');
}

(async () => {
  await ollamaJS();
  await openaiNode();
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
