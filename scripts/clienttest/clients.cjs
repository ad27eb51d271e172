// Real, unmodified npm clients against a running `mlxg serve`: ollama-js (npm "ollama") and openai-node
// (npm "openai"). e2e/ runs this with MLXG_URL (the server), MLXG_NODE_MODULES (where scripts/test installed
// the clients), MLXG_MODEL (the scripted test model in the store) and MLXG_PULL (a repo on the fake hub).
// The expected texts are api/apitest's scripts. Exits non-zero on the first failed check.
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const pullName = process.env.MLXG_PULL;
const { Ollama } = require(path.join(nm, 'ollama'));
const OpenAI = require(path.join(nm, 'openai')).default;

const thinking = 'Weather needs a tool';
const plain = 'The weather in Paris is sunny.';
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

async function ollamaJS() {
  const ollama = new Ollama({ host: base });
  const list = await ollama.list();
  assert.ok(list.models.some((m) => m.name === model + ":latest"), 'list has the model');
  const show = await ollama.show({ model });
  assert.equal(show.details.family, 'llama');
  assert.ok(show.capabilities.includes('completion'));

  // pull from the fake hub, with progress
  const statuses = [];
  let sawBytes = false;
  for await (const p of await ollama.pull({ model: pullName, stream: true })) {
    statuses.push(p.status);
    if (p.total > 0 && p.completed === p.total) sawBytes = true;
  }
  assert.equal(statuses.at(-1), 'success');
  assert.ok(sawBytes, 'pull reported byte progress: ' + statuses.join(', '));

  // generate, streaming and not
  let text = '', think = '', last;
  for await (const part of await ollama.generate({ model, prompt: 'Weather?', think: false, stream: true })) {
    text += part.response;
    last = part;
  }
  assert.equal(text, plain);
  assert.ok(last.done && last.eval_count > 0 && last.prompt_eval_count > 0 && last.done_reason === 'stop');
  const g = await ollama.generate({ model, prompt: 'Weather?', stream: false });
  assert.equal(g.thinking, thinking);

  // chat: a tool-call round trip
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const first = await ollama.chat({ model, messages, tools: [weatherTool] });
  assert.equal(first.message.thinking, thinking);
  assert.equal(first.message.tool_calls.length, 1);
  const call = first.message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(call.function.arguments, { city: 'Paris' });
  messages.push(first.message);
  messages.push({ role: 'tool', content: 'sunny, 24 C', tool_name: 'get_weather' });
  text = '';
  for await (const part of await ollama.chat({ model, messages, tools: [weatherTool], think: false, stream: true })) {
    text += part.message.content;
  }
  assert.equal(text, plain);

  // embeddings
  const e = await ollama.embed({ model, input: ['The weather', 'in Paris'] });
  assert.equal(e.embeddings.length, 2);
  assert.equal(e.embeddings[0].length, 64);
  const e1 = await ollama.embeddings({ model, prompt: 'The weather' });
  assert.equal(e1.embedding.length, 64);

  const ps = await ollama.ps();
  assert.ok(ps.models.some((m) => m.name === model + ":latest" && m.context_length > 0), 'ps lists the model');

  await ollama.copy({ source: model, destination: 'js-copy' });
  assert.ok((await ollama.list()).models.some((m) => m.name === 'js-copy:latest'));
  await ollama.delete({ model: 'js-copy' });
  assert.ok(!(await ollama.list()).models.some((m) => m.name === 'js-copy:latest'));

  await assert.rejects(ollama.generate({ model: 'nope', prompt: 'hi', stream: false }), (err) => {
    assert.equal(err.status_code, 404);
    assert.match(err.error, /model 'nope' not found/);
    return true;
  });
  console.log('ollama-js: ok');
}

async function openaiNode() {
  const client = new OpenAI({ baseURL: base + '/v1/', apiKey: 'mlxg' });
  const models = await client.models.list();
  assert.ok(models.data.some((m) => m.id === model + ":latest"));
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);

  // streaming with usage and a tool call
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [weatherTool],
    stream: true,
    stream_options: { include_usage: true },
  });
  let args = '', name = '', reasoning = '', finish, usage;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      reasoning += c.delta.reasoning_content || '';
      for (const tc of c.delta.tool_calls || []) {
        name += tc.function?.name || '';
        args += tc.function?.arguments || '';
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(reasoning, thinking);
  assert.equal(name, 'get_weather');
  assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  assert.equal(finish, 'tool_calls');
  assert.ok(usage.prompt_tokens > 0 && usage.completion_tokens > 0 && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens);

  const plainReply = await client.chat.completions.create({
    model, reasoning_effort: 'none', messages: [{ role: 'user', content: 'Weather?' }],
  });
  assert.equal(plainReply.choices[0].message.content, plain);
  assert.equal(plainReply.choices[0].finish_reason, 'stop');

  const emb = await client.embeddings.create({ model, input: ['The weather', 'in Paris'] });
  assert.equal(emb.data.length, 2);
  assert.equal(emb.data[0].embedding.length, 64);

  await assert.rejects(client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] }), (err) => {
    assert.equal(err.status, 404);
    return true;
  });
  console.log('openai-node: ok');
}

(async () => {
  await ollamaJS();
  await openaiNode();
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
