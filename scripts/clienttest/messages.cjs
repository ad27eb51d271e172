// Real, unmodified npm clients against a running `mlxg serve`, on the two newer chat APIs: Anthropic's
// Messages API through the official @anthropic-ai/sdk, and OpenAI's Responses API through openai-node's
// client.responses. e2e/ runs this with MLXG_URL (the server), MLXG_NODE_MODULES (where scripts/test
// installed the clients) and MLXG_MODEL (the scripted test model: with thinking on it thinks and calls
// get_weather, with thinking off it answers in text; api/apitest). Exits non-zero on the first failed check.
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');

const nm = process.env.MLXG_NODE_MODULES;
const base = process.env.MLXG_URL;
const model = process.env.MLXG_MODEL;
const Anthropic = require(path.join(nm, '@anthropic-ai/sdk')).default;
const OpenAI = require(path.join(nm, 'openai')).default;

const thinking = 'Weather needs a tool';
const plain = 'The weather in Paris is sunny.';
const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

async function anthropicSDK() {
  const client = new Anthropic({ baseURL: base, apiKey: 'mlxg-ignores-this', maxRetries: 0 });
  const tools = [{ name: 'get_weather', description: 'Current weather in a city', input_schema: schema }];
  const question = { role: 'user', content: 'What is the weather in Paris?' };

  // Not streamed: the model thinks and calls the tool.
  const first = await client.messages.create({ model, max_tokens: 256, system: 'You are terse.', messages: [question], tools });
  assert.equal(first.type, 'message');
  assert.equal(first.role, 'assistant');
  assert.equal(first.stop_reason, 'tool_use');
  assert.equal(first.stop_sequence, null);
  assert.ok(first.usage.input_tokens > 0 && first.usage.output_tokens > 0, 'usage: ' + JSON.stringify(first.usage));
  assert.deepEqual(first.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(first.content[0].thinking, thinking);
  const use = first.content[1];
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'Paris' });

  // The tool round trip, streamed with the SDK's helper: the assistant turn goes back as the SDK returned
  // it (thinking block included), the result as a tool_result block.
  const messages = [
    question,
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny, 24 C' }] },
  ];
  const stream = client.messages.stream({ model, max_tokens: 256, messages, tools, thinking: { type: 'disabled' } });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const answer = await stream.finalMessage();
  assert.equal(text, plain);
  assert.equal(answer.stop_reason, 'end_turn');
  assert.deepEqual(answer.content, [{ type: 'text', text: plain }]);
  assert.ok(answer.usage.input_tokens > 0 && answer.usage.output_tokens > 0, 'streamed usage: ' + JSON.stringify(answer.usage));

  // Raw events with stream: true, thinking enabled: the event sequence and its deltas.
  const events = await client.messages.create({ model, max_tokens: 256, messages: [question], tools, stream: true,
    thinking: { type: 'enabled', budget_tokens: 1024 } });
  const kinds = [];
  let thought = '', json = '', stop;
  for await (const ev of events) {
    if (kinds.at(-1) !== ev.type || ev.type !== 'content_block_delta') kinds.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'thinking_delta') thought += ev.delta.thinking;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') json += ev.delta.partial_json;
    if (ev.type === 'message_delta') stop = ev.delta.stop_reason;
  }
  assert.deepEqual(kinds, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop',
    'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  assert.equal(thought, thinking);
  assert.deepEqual(JSON.parse(json), { city: 'Paris' });
  assert.equal(stop, 'tool_use');

  // A stop sequence ends with stop_sequence, and max_tokens with max_tokens.
  const cut = await client.messages.create({ model, max_tokens: 256, stop_sequences: ['sunny'], thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Weather?' }] });
  assert.equal(cut.stop_reason, 'stop_sequence');
  assert.equal(cut.stop_sequence, 'sunny');
  assert.equal(cut.content[0].text, 'The weather in Paris is ');
  const short = await client.messages.create({ model, max_tokens: 2, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'Weather?' }] });
  assert.equal(short.stop_reason, 'max_tokens');

  // Errors in Anthropic's shape, as the SDK's error classes.
  await assert.rejects(client.messages.create({ model: 'nope', max_tokens: 10, messages: [question] }), (err) => {
    assert.ok(err instanceof Anthropic.NotFoundError, String(err));
    assert.equal(err.error.type, 'error');
    assert.equal(err.error.error.type, 'not_found_error');
    return true;
  });
  await assert.rejects(client.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] }), (err) => {
    assert.ok(err instanceof Anthropic.BadRequestError, String(err));
    assert.equal(err.error.error.type, 'invalid_request_error');
    assert.match(err.error.error.message, /tool_use_id/);
    return true;
  });
  console.log('@anthropic-ai/sdk: ok');
}

async function openaiResponses() {
  const client = new OpenAI({ baseURL: base + '/v1/', apiKey: 'mlxg', maxRetries: 0 });
  const tools = [{ type: 'function', name: 'get_weather', description: 'Current weather in a city', parameters: schema, strict: false }];

  // Not streamed: a reasoning item and a function_call item.
  const first = await client.responses.create({ model, input: 'What is the weather in Paris?', tools });
  assert.equal(first.object, 'response');
  assert.equal(first.status, 'completed');
  assert.deepEqual(first.output.map((o) => o.type), ['reasoning', 'function_call']);
  assert.equal(first.output[0].content[0].text, thinking);
  const call = first.output[1];
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
  assert.ok(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);

  // Streamed, continuing with previous_response_id: the function's output, then the answer's events.
  const stream = await client.responses.create({ model, previous_response_id: first.id, tools, stream: true,
    reasoning: { effort: 'none' }, input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 24 C' }] });
  const kinds = [];
  let text = '', done;
  for await (const ev of stream) {
    if (kinds.at(-1) !== ev.type) kinds.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') done = ev.response;
  }
  assert.deepEqual(kinds, ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
  assert.equal(text, plain);
  assert.equal(done.status, 'completed');
  assert.equal(done.previous_response_id, first.id);
  assert.equal(done.output[0].content[0].text, plain);
  assert.ok(done.usage.input_tokens > first.usage.input_tokens, 'the earlier turns were in the prompt');

  // The SDK's stream helper accumulates the events into the final response.
  const helper = client.responses.stream({ model, instructions: 'Be brief.', input: [{ role: 'user', content: 'Weather?' }], reasoning: { effort: 'none' } });
  const final = await helper.finalResponse();
  assert.equal(final.output_text, plain);
  const thoughtful = await client.responses.stream({ model, input: 'Weather in Paris?', tools }).finalResponse();
  assert.deepEqual(thoughtful.output.map((o) => o.type), ['reasoning', 'function_call']);

  // max_output_tokens: incomplete.
  const short = await client.responses.create({ model, input: 'Weather?', max_output_tokens: 2, reasoning: { effort: 'none' } });
  assert.equal(short.status, 'incomplete');
  assert.equal(short.incomplete_details.reason, 'max_output_tokens');

  // Errors in OpenAI's shape.
  await assert.rejects(client.responses.create({ model: 'nope', input: 'hi' }), (err) => {
    assert.equal(err.status, 404);
    assert.match(err.error.message, /model 'nope' not found/);
    return true;
  });
  await assert.rejects(client.responses.create({ model, input: 'hi', previous_response_id: 'resp_unknown' }), (err) => {
    assert.equal(err.status, 404);
    assert.match(err.error.message, /previous response/);
    return true;
  });
  await assert.rejects(client.responses.create({ model, input: [{ type: 'item_reference', id: 'x' }] }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.error.type, 'invalid_request_error');
    return true;
  });
  console.log('openai-node responses: ok');
}

(async () => {
  await anthropicSDK();
  await openaiResponses();
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
