// openai-node (npm "openai") against respgate's Chat Completions front door
// (docs/chat-completions.md): the 4-step chat tool loop, non-streamed and through the strict
// chat.completions.stream() helper. The client keeps only the visible history (text and tool
// calls), as chat agents do; the simulator's answers prove the earlier reasoning reached the model.
// Usage: node chat.mjs <package>, where <package> is "openai" (7.x) or "openai-v6" (6.x).
import { assert, apiKey, baseURL, main, model, report, version, withTimeout } from './lib.mjs';

const pkg = process.argv[2] ?? 'openai';
const { default: OpenAI } = await import(pkg);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const client_ = `openai-node ${version(pkg)}`;

const tools = ['lookup', 'weather'].map((name) => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } },
}));

// visible is the assistant message a chat agent keeps: text and tool calls, no reasoning.
function visible(msg) {
  const out = { role: 'assistant', content: msg.content ?? '' };
  if (msg.tool_calls?.length) out.tool_calls = msg.tool_calls.map(({ id, type, function: f }) => ({ id, type, function: { name: f.name, arguments: f.arguments } }));
  return out;
}

async function turn(messages, stream) {
  if (!stream) {
    const c = await client.chat.completions.create({ model, messages, tools });
    return { msg: c.choices[0].message, reasoning: c.choices[0].message.reasoning_content ?? '', finish: c.choices[0].finish_reason };
  }
  const s = client.chat.completions.stream({ model, messages, tools, stream_options: { include_usage: true } });
  let reasoning = '';
  for await (const chunk of s) reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
  const c = await s.finalChatCompletion();
  assert.ok(c.usage?.total_tokens > 0, 'no usage chunk');
  return { msg: c.choices[0].message, reasoning, finish: c.choices[0].finish_reason };
}

async function loop(stream) {
  const messages = [];
  const results = [];
  for (const user of ['remember: the code is 42. call lookup', null, 'now call weather', null]) {
    if (user) messages.push({ role: 'user', content: user });
    const r = await turn(messages, stream);
    results.push(r);
    messages.push(visible(r.msg));
    for (const tc of r.msg.tool_calls ?? []) messages.push({ role: 'tool', tool_call_id: tc.id, content: `result of ${tc.function.name}` });
  }
  assert.deepEqual(results.map((r) => r.finish), ['tool_calls', 'stop', 'tool_calls', 'stop']);
  assert.ok(results[3].msg.content.includes('3 reasoning items'), results[3].msg.content);
  const quote = results[2].reasoning.split(/\s+/).join(' ').slice(0, 40);
  assert.ok(results[3].reasoning.includes(`Prior reasoning: "${quote}`), results[3].reasoning);
}

await main(async () => {
  await withTimeout('chat loop', 60_000, loop(false));
  report({ client: client_, mode: 'sync', tools: 'function', continuation: 'chat history', scenario: 'chat.completions 4-step tool loop, reasoning replayed', result: 'pass' });
  await withTimeout('chat stream loop', 60_000, loop(true));
  report({ client: client_, mode: 'stream', tools: 'function', continuation: 'chat history', scenario: 'chat.completions.stream 4-step tool loop, reasoning replayed', result: 'pass' });
});
