// Logprobs and the generate context through real, unmodified npm clients: ollama-js (npm "ollama") and
// openai-node (npm "openai"), against a running `mlxg serve` with the scripted test model (api/apitest).
// e2e/node_logprobs_test.go runs it with MLXG_URL, MLXG_NODE_MODULES and MLXG_MODEL. The model follows its
// script with a margin of about 32 nats: every generated token has a log-probability near 0 and is the
// first of its top alternatives. Exits non-zero on the first failed check.
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const { Ollama } = require(path.join(nm, 'ollama'));
const OpenAI = require(path.join(nm, 'openai')).default;

const plain = 'The weather in Paris is sunny.';

function checkEntry(lp, top, where) {
  assert.ok(lp.logprob <= 0 && lp.logprob > -1e-3, where + ': logprob ' + lp.logprob);
  assert.ok(Array.isArray(lp.bytes) && lp.bytes.length > 0, where + ': bytes');
  assert.equal(Buffer.from(lp.bytes).toString('utf8'), lp.token, where + ': bytes spell the token');
  assert.equal(lp.top_logprobs.length, top, where + ': top_logprobs');
  assert.equal(lp.top_logprobs[0].token, lp.token, where + ': the token is the likeliest');
}

async function ollamaJS() {
  const ollama = new Ollama({ host: base });
  // streaming: each piece carries the logprobs of its tokens
  let text = '', tokens = '', n = 0, last;
  for await (const part of await ollama.generate({ model, prompt: 'Weather?', think: false, stream: true, logprobs: true, top_logprobs: 2 })) {
    text += part.response;
    for (const lp of part.logprobs || []) {
      checkEntry(lp, 2, 'ollama-js generate');
      tokens += lp.token;
      n++;
    }
    last = part;
  }
  assert.equal(text, plain);
  assert.equal(tokens, plain);
  assert.equal(n, last.eval_count);
  // the context continues the conversation
  assert.ok(Array.isArray(last.context) && last.context.length > last.prompt_eval_count, 'context returned');
  const next = await ollama.generate({ model, prompt: 'Weather?', think: false, stream: false, context: last.context });
  assert.equal(next.prompt_eval_count, last.context.length + last.prompt_eval_count);

  const chat = await ollama.chat({ model, think: false, messages: [{ role: 'user', content: 'Weather?' }], logprobs: true, top_logprobs: 1 });
  assert.equal(chat.message.content, plain);
  assert.equal(chat.logprobs.length, chat.eval_count);
  chat.logprobs.forEach((lp, i) => checkEntry(lp, 1, 'ollama-js chat ' + i));

  await assert.rejects(ollama.chat({ model, messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 21, stream: false }), (err) => {
    assert.equal(err.status_code, 400);
    assert.match(err.error, /top_logprobs is 21/);
    return true;
  });
  console.log('ollama-js logprobs: ok');
}

async function openaiNode() {
  const client = new OpenAI({ baseURL: base + '/v1/', apiKey: 'mlxg' });
  const whole = await client.chat.completions.create({
    model, reasoning_effort: 'none', messages: [{ role: 'user', content: 'Weather?' }], logprobs: true, top_logprobs: 2,
  });
  const content = whole.choices[0].logprobs.content;
  assert.equal(whole.choices[0].message.content, plain);
  assert.equal(content.length, whole.usage.completion_tokens);
  content.forEach((lp, i) => checkEntry(lp, 2, 'openai-node chat ' + i));
  assert.equal(content.map((lp) => lp.token).join(''), plain);

  const stream = await client.chat.completions.create({
    model, reasoning_effort: 'none', messages: [{ role: 'user', content: 'Weather?' }], logprobs: true, top_logprobs: 2, stream: true,
  });
  const streamed = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) streamed.push(...(c.logprobs?.content || []));
  }
  assert.deepEqual(streamed, content);

  const plainReply = await client.chat.completions.create({ model, reasoning_effort: 'none', messages: [{ role: 'user', content: 'Weather?' }] });
  assert.equal(plainReply.choices[0].logprobs, null);

  const comp = await client.completions.create({ model, prompt: 'Weather?', logprobs: 2, max_tokens: 4 });
  const lp = comp.choices[0].logprobs;
  assert.equal(lp.tokens.length, comp.usage.completion_tokens);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  assert.equal(lp.text_offset[0], 0);
  lp.top_logprobs.forEach((m, i) => assert.ok(Object.keys(m).length >= 1 && Object.keys(m).length <= 2 && m[lp.tokens[i]] !== undefined, 'top ' + i));

  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 21 }), (err) => {
    assert.equal(err.status, 400);
    assert.match(err.message, /between 0 and 20/);
    return true;
  });
  console.log('openai-node logprobs: ok');
}

(async () => {
  await ollamaJS();
  await openaiNode();
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
