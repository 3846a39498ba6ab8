// The OpenAI Agents SDK (@openai/agents) with a function tool, over the Responses API, in both of
// its server-managed continuation modes: previousResponseId (it then sends only the new items,
// e.g. just the function_call_output) and conversationId; streamed and not. And stateless: store:false
// with include reasoning.encrypted_content (modelSettings.store, and providerData.include, which the
// SDK spreads over the request body), the SDK's own history (result.history) sent back each run.
import { Agent, run, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, tool } from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';
import { assert, apiKey, baseURL, main, model, report, seenReasoning, version, withTimeout } from './lib.mjs';

setTracingDisabled(true); // no trace export to OpenAI
setOpenAIAPI('responses');
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
setDefaultOpenAIClient(client);
const client_ = `@openai/agents ${version('@openai/agents')}`;

let calls = 0;
const getWeather = tool({
  name: 'get_weather',
  description: 'Current weather of a city.',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls++;
    return `cloudy in ${city}`;
  },
});
const agent = new Agent({ name: 'compat', instructions: 'Answer briefly.', model, tools: [getWeather] });
const statelessAgent = new Agent({
  name: 'compat-stateless', instructions: 'Answer briefly.', model,
  modelSettings: { store: false, providerData: { include: ['reasoning.encrypted_content'] } },
});

// A run must end on its own: an empty response.completed output would make the SDK loop
// (maxTurns bounds it, the timeout catches the rest).
const opts = { maxTurns: 4 };

await main(async () => {
  for (const stream of [false, true]) {
    const mode = stream ? 'stream' : 'non-stream';

    // previousResponseId: turn 1 makes the tool call, the SDK runs the tool and sends only its
    // output with previous_response_id; turn 2 continues the chain by its last response id.
    {
      calls = 0;
      const r1 = await withTimeout('run 1', 30_000, runOnce(agent, 'call get_weather for Lima', { ...opts, previousResponseId: undefined }, stream));
      assert.equal(calls, 1, 'the tool ran ' + calls + ' times');
      assert.ok(String(r1.finalOutput).includes('Tool said: cloudy in'), String(r1.finalOutput));
      assert.ok(r1.lastResponseId?.startsWith('resp_'), String(r1.lastResponseId));
      const r2 = await withTimeout('run 2', 30_000, runOnce(agent, 'remember: tea at five. What now?', { ...opts, previousResponseId: r1.lastResponseId }, stream));
      assert.ok(String(r2.finalOutput).includes('tea at five'), String(r2.finalOutput));
      const stored = await client.responses.retrieve(r2.lastResponseId);
      assert.equal(stored.previous_response_id, r1.lastResponseId);
      report({ client: client_, mode, tools: 'function', continuation: 'previousResponseId', scenario: 'run with a tool, then a second run on the chain', result: 'pass' });
    }

    // conversationId: the server keeps the history; the SDK sends only new items.
    {
      calls = 0;
      const conv = await client.conversations.create({});
      const r1 = await withTimeout('run 1', 30_000, runOnce(agent, 'remember: code 7. call get_weather for Kyiv', { ...opts, conversationId: conv.id }, stream));
      assert.equal(calls, 1, 'the tool ran ' + calls + ' times');
      assert.ok(String(r1.finalOutput).includes('Tool said: cloudy in'), String(r1.finalOutput));
      const r2 = await withTimeout('run 2', 30_000, runOnce(agent, 'And the code?', { ...opts, conversationId: conv.id }, stream));
      assert.ok(String(r2.finalOutput).includes('code 7'), String(r2.finalOutput));
      const items = [];
      for await (const it of client.conversations.items.list(conv.id, { order: 'asc' })) items.push(it);
      assert.ok(items.some((it) => it.type === 'function_call_output'), 'no function_call_output in the conversation');
      report({ client: client_, mode, tools: 'function', continuation: 'conversationId', scenario: `two runs on one conversation (${items.length} items)`, result: 'pass' });
    }

    // Stateless: five runs, each given the previous run's result.history plus a new question.
    // The SDK keeps each reasoning item's encrypted_content, and the rest of the item (its
    // reasoning_text content too) as providerData, and sends all of it back: respgate opens the
    // blob and checks it agrees with the content. In the streamed variant the client strips the
    // content first and keeps only the blob, as a ZDR client persisting history would. Either
    // way the model's answer counts the reasoning items it saw.
    {
      const keep = stream ? 'only encrypted_content' : 'encrypted_content + content, as the SDK replays';
      let history = [];
      const seen = [];
      for (let turn = 1; turn <= 5; turn++) {
        const input = [...history, { role: 'user', content: `question ${turn}` }];
        const r = await withTimeout(`stateless run ${turn}`, 30_000, runOnce(statelessAgent, input, opts, stream));
        seen.push(seenReasoning(String(r.finalOutput)));
        assert.equal(seen.at(-1), turn - 1, `run ${turn}: ${r.finalOutput}`);
        const kept = r.history.filter((it) => it.type === 'reasoning');
        assert.equal(kept.length, turn, `run ${turn}: ${kept.length} reasoning items in result.history`);
        for (const it of kept) assert.ok(String(it.providerData?.encrypted_content).startsWith('rgr1.'), `run ${turn}: ${JSON.stringify(it)}`);
        history = stream ? r.history.map(blobOnly) : r.history;
      }
      report({ client: client_, mode, tools: 'none', continuation: 'result.history, store:false', scenario: `5 runs, include reasoning.encrypted_content, replaying ${keep}; reasoning items seen per run: ${seen.join(',')}`, result: 'pass' });
    }
  }
});

async function runOnce(agent, input, options, stream) {
  if (!stream) return run(agent, input, options);
  const result = await run(agent, input, { ...options, stream: true });
  let text = '';
  for await (const chunk of result.toTextStream()) text += chunk;
  await result.completed;
  assert.equal(text, String(result.finalOutput), 'streamed text differs from finalOutput');
  return result;
}

// blobOnly strips a reasoning item of the SDK's history down to its id and encrypted_content.
function blobOnly(item) {
  if (item.type !== 'reasoning') return item;
  return { type: 'reasoning', id: item.id, content: [], providerData: { encrypted_content: item.providerData.encrypted_content } };
}
