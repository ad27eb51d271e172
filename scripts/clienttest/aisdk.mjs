// The Vercel AI SDK (`ai`) against a running `mlxg serve`, through its two ways in: the Ollama provider
// (ollama-ai-provider-v2, on /api/chat and /api/embed) and the OpenAI-compatible provider
// (@ai-sdk/openai-compatible, on /v1/chat/completions and /v1/embeddings). e2e/ runs this with MLXG_URL (the
// server), MLXG_NODE_MODULES (where scripts/test installed the packages), MLXG_MODEL (the trained qwen3-tiny,
// which writes loose text: the checks are about the protocol, not the words) and MLXG_MAX_TOKENS. Every check
// runs; each prints "ok" or "FAIL", and the exit status is non-zero when one failed.
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const maxOutputTokens = Number(process.env.MLXG_MAX_TOKENS || 48);

// The packages live in MLXG_NODE_MODULES, outside this script's folder: resolve them from there.
const resolve = createRequire(path.join(nm, 'noop.js')).resolve;
const load = (name) => import(pathToFileURL(resolve(name)).href);
const { generateText, streamText, generateObject, embed, embedMany, tool, stepCountIs } = await load('ai');
globalThis.AI_SDK_LOG_WARNINGS = false; // generateObject's deprecation notice
const { createOllama } = await load('ollama-ai-provider-v2');
const { createOpenAICompatible } = await load('@ai-sdk/openai-compatible');
const { z } = await load('zod');

let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${err?.stack ?? err}`);
    for (let e = err?.cause, depth = 0; e && depth < 3; e = e.cause, depth++) {
      console.log(`     cause: ${e?.message ?? e}`);
    }
    if (err?.responseBody) console.log(`     response body: ${String(err.responseBody).slice(0, 1000)}`);
  }
}

const finished = ['stop', 'length'];
function checkText(r, name) {
  assert.ok(finished.includes(r.finishReason), `${name}: finishReason ${r.finishReason}`);
  assert.equal(typeof r.text, 'string');
  assert.ok(r.text.length + (r.reasoningText ?? '').length > 0, `${name}: no text`);
  assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0, `${name}: usage ${JSON.stringify(r.usage)}`);
}

const weather = tool({
  description: 'Current weather in a city',
  inputSchema: z.object({ city: z.string().describe('the city') }),
  execute: async ({ city }) => `sunny, 24 C in ${city}`,
});

// A finished tool round trip as history: the SDK serializes the assistant's tool call and the tool's result
// in the provider's wire format, and the server must take both and answer.
const history = [
  { role: 'user', content: 'What is the weather in Paris?' },
  { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'call_mlxg_1', toolName: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'call_mlxg_1', toolName: 'get_weather', output: { type: 'text', value: 'sunny, 24 C' } }] },
];

// Room for the whole object: the schema allows some whitespace between tokens, which this model uses.
const objectTokens = 160;
const answer = z.object({ answer: z.enum(['yes', 'no']), confidence: z.number().int().min(0).max(9) });

async function suite(label, chat, embedder, objectOptions) {
  await check(`${label} generateText`, async () => {
    checkText(await generateText({ model: chat, prompt: 'In the beginning', maxOutputTokens }), 'generateText');
  });
  await check(`${label} streamText`, async () => {
    const r = streamText({ model: chat, prompt: 'In the beginning', maxOutputTokens, onError: ({ error }) => { throw error; } });
    let chunks = 0, text = '';
    for await (const part of r.fullStream) {
      if (part.type === 'error') throw part.error;
      if (part.type === 'text-delta') { chunks++; text += part.text; }
    }
    const [finishReason, usage, reasoningText] = await Promise.all([r.finishReason, r.usage, r.reasoningText]);
    checkText({ finishReason, usage, text, reasoningText }, 'streamText');
    assert.ok(chunks >= 1 || (reasoningText ?? '').length > 0, `streamText: ${chunks} text chunks`);
  });
  await check(`${label} tools offered`, async () => {
    const r = await generateText({ model: chat, prompt: 'What is the weather in Paris?', tools: { get_weather: weather },
      maxOutputTokens, stopWhen: stepCountIs(2) });
    for (const s of r.steps) {
      assert.ok([...finished, 'tool-calls'].includes(s.finishReason), `step finishReason ${s.finishReason}`);
    }
  });
  await check(`${label} tool result in history`, async () => {
    checkText(await generateText({ model: chat, messages: history, tools: { get_weather: weather }, maxOutputTokens }), 'tool result');
  });
  await check(`${label} generateObject`, async () => {
    const r = await generateObject({ model: chat, schema: answer, prompt: 'Is the sky blue? Answer with JSON.', ...objectOptions });
    assert.ok(['yes', 'no'].includes(r.object.answer), JSON.stringify(r.object));
    assert.equal(r.finishReason, 'stop');
  });
  await check(`${label} embed`, async () => {
    const r = await embed({ model: embedder, value: 'In the beginning' });
    assert.ok(Array.isArray(r.embedding) && r.embedding.length > 0, `embedding of length ${r.embedding?.length}`);
    assert.ok(r.embedding.every(Number.isFinite));
  });
  await check(`${label} embedMany`, async () => {
    const r = await embedMany({ model: embedder, values: ['In the beginning', 'was the word'] });
    assert.equal(r.embeddings.length, 2);
    assert.ok(r.embeddings[0].length > 0 && r.embeddings[0].length === r.embeddings[1].length);
    assert.notDeepEqual(r.embeddings[0], r.embeddings[1]);
  });
}

const ollama = createOllama({ baseURL: `${base}/api` });
// This provider sends maxOutputTokens as a top-level max_output_tokens, which Ollama's /api/chat does not
// read; its own way to a token limit is options.num_predict.
await suite('ollama-ai-provider-v2', ollama(model), ollama.embedding(model),
  { providerOptions: { ollama: { options: { num_predict: objectTokens } } } });

const compat = createOpenAICompatible({ name: 'mlxg', baseURL: `${base}/v1`, apiKey: 'mlxg-ignores-this',
  supportsStructuredOutputs: true, includeUsage: true });
await suite('@ai-sdk/openai-compatible', compat.chatModel(model), compat.embeddingModel(model), { maxOutputTokens: objectTokens });

if (failed) {
  console.log(`${failed} check(s) failed`);
  process.exit(1);
}
