// Real, unmodified npm clients sending an image to a running `mlxg serve`: openai-node's chat
// completions with an image_url data URL, and the official @anthropic-ai/sdk's messages with a base64
// image block, both streamed. e2e/vision_test.go runs this with MLXG_URL (the server), MLXG_NODE_MODULES
// (where scripts/test installed the clients), MLXG_MODEL (a tiny random model with a vision tower, whose
// answers are random text), MLXG_OPENAI_IMAGE / MLXG_ANTHROPIC_IMAGE (PNG files) and
// MLXG_OPENAI_IMAGE_TOKENS / MLXG_ANTHROPIC_IMAGE_TOKENS (the image tokens each becomes for that model's
// family). The Go test checks in the server's log that each image went through the tower. Exits non-zero
// on the first failed check.
'use strict';
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const Anthropic = require(path.join(nm, '@anthropic-ai/sdk')).default;
const OpenAI = require(path.join(nm, 'openai')).default;

const imageTokens = (name) => {
  const n = Number(process.env[name]);
  assert.ok(Number.isInteger(n) && n > 0, `${name}=${process.env[name]} is not a token count`);
  return n;
};
const b64 = (file) => fs.readFileSync(file).toString('base64');

async function openaiNode() {
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'mlxg-ignores-this', maxRetries: 0 });
  const url = 'data:image/png;base64,' + b64(process.env.MLXG_OPENAI_IMAGE);
  const stream = await client.chat.completions.create({
    model, stream: true, max_tokens: 12, temperature: 0, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: [
      { type: 'text', text: 'What is in this picture?' },
      { type: 'image_url', image_url: { url, detail: 'auto' } },
    ] }],
  });
  let text = '', chunks = 0, finish, usage;
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices[0];
    if (c) {
      text += c.delta.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  assert.ok(chunks > 2, `${chunks} chunks`);
  assert.ok(text.length > 0, 'no text streamed');
  assert.equal(finish, 'length');
  // The image's tokens are part of the prompt.
  assert.ok(usage && usage.prompt_tokens > imageTokens('MLXG_OPENAI_IMAGE_TOKENS'), 'usage: ' + JSON.stringify(usage));
  console.log('openai-node streamed %d chunks: %j (%d prompt tokens)', chunks, text, usage.prompt_tokens);

  // An http(s) URL is refused with a 400 that says why: mlxg fetches nothing.
  await assert.rejects(client.chat.completions.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [
    { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }] }),
  (err) => err.status === 400 && /not fetched/.test(err.message));
}

async function anthropicSDK() {
  const client = new Anthropic({ baseURL: base, apiKey: 'mlxg-ignores-this', maxRetries: 0 });
  const stream = client.messages.stream({
    model, max_tokens: 12, temperature: 0,
    messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64(process.env.MLXG_ANTHROPIC_IMAGE) } },
      { type: 'text', text: 'Describe the image.' },
    ] }],
  });
  let text = '', deltas = 0;
  stream.on('text', (t) => { text += t; deltas++; });
  const msg = await stream.finalMessage();
  assert.ok(deltas > 1, `${deltas} text deltas`);
  assert.ok(text.length > 0, 'no text streamed');
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.ok(msg.usage.input_tokens > imageTokens('MLXG_ANTHROPIC_IMAGE_TOKENS'), 'usage: ' + JSON.stringify(msg.usage));
  console.log('@anthropic-ai/sdk streamed %d deltas: %j (%d input tokens)', deltas, text, msg.usage.input_tokens);
}

(async () => {
  await openaiNode();
  await anthropicSDK();
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
