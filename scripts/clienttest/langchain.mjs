// LangChain JS against a running `mlxg serve`: ChatOllama and OllamaEmbeddings (@langchain/ollama, on
// /api/chat and /api/embed), ChatOpenAI and OpenAIEmbeddings (@langchain/openai, on /v1/chat/completions and
// /v1/embeddings). e2e/ runs this with MLXG_URL, MLXG_NODE_MODULES, MLXG_MODEL (the trained qwen3-tiny: the
// checks are about the protocol, not the words) and MLXG_MAX_TOKENS. Every check runs; each prints "ok" or
// "FAIL", and the exit status is non-zero when one failed.
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const maxTokens = Number(process.env.MLXG_MAX_TOKENS || 48);

// The packages live in MLXG_NODE_MODULES, outside this script's folder: resolve them from there, all through
// the same (require) entry points so that @langchain/core is one module instance.
const resolve = createRequire(path.join(nm, 'noop.js')).resolve;
const load = (name) => import(pathToFileURL(resolve(name)).href);
const { ChatOllama, OllamaEmbeddings } = await load('@langchain/ollama');
const { ChatOpenAI, OpenAIEmbeddings } = await load('@langchain/openai');
const { HumanMessage, AIMessage, ToolMessage } = await load('@langchain/core/messages');
const { tool } = await load('@langchain/core/tools');
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
    if (err?.error) console.log(`     error body: ${JSON.stringify(err.error).slice(0, 1000)}`);
  }
}

function checkReply(m, name) {
  assert.equal(typeof m.content, 'string', `${name}: content ${JSON.stringify(m.content)}`);
  const thought = m.additional_kwargs?.reasoning_content ?? '';
  assert.ok(m.content.length + thought.length > 0 || m.tool_calls?.length > 0, `${name}: empty reply ${JSON.stringify(m)}`);
  assert.ok(m.usage_metadata?.output_tokens > 0, `${name}: usage_metadata ${JSON.stringify(m.usage_metadata)}`);
}

const weather = tool(async ({ city }) => `sunny, 24 C in ${city}`, {
  name: 'get_weather',
  description: 'Current weather in a city',
  schema: z.object({ city: z.string().describe('the city') }),
});

// A finished tool round trip as history: LangChain serializes the AI message's tool call and the tool's
// result in the provider's wire format, and the server must take both and answer.
const history = () => [
  new HumanMessage('What is the weather in Paris?'),
  new AIMessage({ content: '', tool_calls: [{ id: 'call_mlxg_1', name: 'get_weather', args: { city: 'Paris' }, type: 'tool_call' }] }),
  new ToolMessage({ tool_call_id: 'call_mlxg_1', name: 'get_weather', content: 'sunny, 24 C' }),
];

// Room for the whole object: the schema allows some whitespace between tokens, which this model uses.
const objectTokens = 160;
const answer = z.object({ answer: z.enum(['yes', 'no']), confidence: z.number().int().min(0).max(9) });

async function suite(label, chat, chatForObjects, embeddings) {
  await check(`${label} invoke`, async () => {
    checkReply(await chat.invoke('In the beginning'), 'invoke');
  });
  await check(`${label} stream`, async () => {
    let all, chunks = 0;
    for await (const chunk of await chat.stream('In the beginning')) {
      chunks++;
      all = all ? all.concat(chunk) : chunk;
    }
    assert.ok(chunks >= 2, `${chunks} chunks`);
    checkReply(all, 'stream');
  });
  await check(`${label} tools offered`, async () => {
    const m = await chat.bindTools([weather]).invoke('What is the weather in Paris?');
    assert.ok(Array.isArray(m.tool_calls), JSON.stringify(m));
    for (const c of m.tool_calls) assert.equal(c.name, 'get_weather');
  });
  await check(`${label} tool result in history`, async () => {
    checkReply(await chat.bindTools([weather]).invoke(history()), 'tool result');
  });
  await check(`${label} withStructuredOutput`, async () => {
    const o = await chatForObjects.withStructuredOutput(answer).invoke('Is the sky blue? Answer with JSON.');
    assert.ok(['yes', 'no'].includes(o.answer), JSON.stringify(o));
  });
  await check(`${label} embedQuery`, async () => {
    const v = await embeddings.embedQuery('In the beginning');
    assert.ok(Array.isArray(v) && v.length > 0 && v.every(Number.isFinite), `embedding of length ${v?.length}`);
  });
  await check(`${label} embedDocuments`, async () => {
    const vs = await embeddings.embedDocuments(['In the beginning', 'was the word']);
    assert.equal(vs.length, 2);
    assert.ok(vs[0].length > 0 && vs[0].length === vs[1].length);
    assert.notDeepEqual(vs[0], vs[1]);
  });
}

const ollama = (numPredict) => new ChatOllama({ model, baseUrl: base, numPredict });
await suite('ChatOllama', ollama(maxTokens), ollama(objectTokens), new OllamaEmbeddings({ model, baseUrl: base }));

const openai = (tokens) => new ChatOpenAI({ model, apiKey: 'mlxg-ignores-this', maxTokens: tokens, maxRetries: 0,
  configuration: { baseURL: `${base}/v1` } });
await suite('ChatOpenAI', openai(maxTokens), openai(objectTokens),
  new OpenAIEmbeddings({ model, apiKey: 'mlxg-ignores-this', maxRetries: 0, configuration: { baseURL: `${base}/v1` } }));

if (failed) {
  console.log(`${failed} check(s) failed`);
  process.exit(1);
}
