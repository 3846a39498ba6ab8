// The OpenAI Agents SDK's OpenAIResponsesCompactionSession over several runs: the session calls
// responses.compact() and replaces its history with the compact output. respgate answers OpenAI's
// window (docs/compaction.md §1): every user message, verbatim and in order, then one compaction
// item standing for the rest. The SDK then sends the model only the items from its latest
// compaction item on (trimToLatestCompaction in @openai/agents-core's runner/items), so the
// compaction item's summary must carry the early facts itself; the user messages before it stay in
// the session for the next compaction.
//
// Two ways the session compacts, each over 6 runs (a tool call among them):
// - automatically after a run, in "auto" mode with stored responses (previous_response_id). After
//   its first compaction the SDK skips automatic compaction ("stored history is not covered by the
//   successful model exchange": the user messages kept before the compaction item are never sent
//   to the model again), so this checks that first compaction and the runs after it;
// - by runCompaction() after every run, in "input" mode: the session's whole history is the
//   compact input, an earlier compaction item included, so the session compacts several times and
//   must keep every user message each time.
//
// The session refuses a model name not shaped like OpenAI's (gpt-*, o*), so respgate runs here in
// front of a simulator serving the harmony model as "gpt-oss-sim" too (compat_test.go); with vLLM,
// serve the model under such a name (--served-model-name gpt-oss-120b).
import { Agent, MemorySession, OpenAIResponsesCompactionSession, run, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, tool } from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';
import { assert, apiKey, baseURL, main, report, version, withTimeout } from './lib.mjs';

const model = process.env.RESPGATE_OPENAI_NAMED_MODEL ?? 'gpt-oss-sim';

setTracingDisabled(true); // no trace export to OpenAI
setOpenAIAPI('responses');
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
setDefaultOpenAIClient(client);
const client_ = `@openai/agents ${version('@openai/agents')}`;

const getWeather = tool({
  name: 'get_weather',
  description: 'Current weather of a city.',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => `cloudy in ${city}`,
});
const agent = new Agent({ name: 'compat-compaction', instructions: 'Answer briefly.', model, tools: [getWeather] });

const facts = ['the vault code is 4417', 'the cat is called Miso', 'deploy on Friday'];
const inputs = [
  `remember: ${facts[0]}`,
  `remember: ${facts[1]}`,
  'call get_weather for Lima',
  `remember: ${facts[2]}`,
  'what is next?',
  'and then?',
];

// userTexts is the text of every user message of the session's items, in order.
function userTexts(items) {
  return items
    .filter((it) => it.type === 'message' && it.role === 'user')
    .map((it) => (typeof it.content === 'string' ? it.content : it.content.map((p) => p.text ?? '').join('')));
}

// check asserts what a session must hold after run n: every user message sent so far, verbatim
// and in order, at most one compaction item, and right after a compaction nothing but user
// messages before it. It returns the compaction item's id, if any.
function check(items, n) {
  const cmp = items.filter((it) => it.type === 'compaction');
  assert.ok(cmp.length <= 1, `run ${n}: ${cmp.length} compaction items in the session: ${JSON.stringify(items)}`);
  assert.deepEqual(userTexts(items), inputs.slice(0, n), `run ${n}: the session's user messages`);
  if (cmp.length === 0) return undefined;
  assert.ok(String(cmp[0].id).startsWith('cmp_') && String(cmp[0].encrypted_content).startsWith('rgr1.'), JSON.stringify(cmp[0]));
  return cmp[0].id;
}

await main(async () => {
  for (const compactionMode of ['auto', 'input']) {
    const manual = compactionMode === 'input';
    const session = new OpenAIResponsesCompactionSession({
      client,
      model,
      compactionMode,
      underlyingSession: new MemorySession(),
      // Compact once the history holds 4 items other than user messages and compaction items
      // (the SDK's default waits for 10): after two plain runs, or one tool run.
      shouldTriggerCompaction: ({ compactionCandidateItems }) => compactionCandidateItems.length >= 4,
    });
    const compactions = new Set();
    for (const [i, input] of inputs.entries()) {
      const r = await withTimeout(`${compactionMode} run ${i + 1}`, 30_000, run(agent, input, { session, maxTurns: 4 }));
      if (input.startsWith('call ')) assert.ok(String(r.finalOutput).includes('Tool said: cloudy in'), String(r.finalOutput));
      const before = await session.getItems();
      const auto = check(before, i + 1);
      if (auto) compactions.add(auto);
      if (manual) {
        await withTimeout(`runCompaction ${i + 1}`, 30_000, session.runCompaction({ responseId: r.lastResponseId }));
        const after = await session.getItems();
        const id = check(after, i + 1);
        if (id && !compactions.has(id)) {
          // Just compacted: the user messages, then the one compaction item, nothing else.
          assert.equal(after.length, i + 2, `run ${i + 1}: the compacted session: ${JSON.stringify(after)}`);
          compactions.add(id);
        }
      }
    }
    assert.ok(compactions.size >= (manual ? 2 : 1), `the session compacted ${compactions.size} times`);
    // The model still sees the first runs' facts, from the summary (it gets nothing before the
    // latest compaction item).
    const last = await withTimeout(`${compactionMode} last run`, 30_000, run(agent, 'what do you remember?', { session, maxTurns: 4 }));
    for (const f of facts) assert.ok(String(last.finalOutput).includes(f), `forgot "${f}": ${last.finalOutput}`);
    report({
      client: client_, mode: 'non-stream', tools: 'function',
      continuation: `OpenAIResponsesCompactionSession, ${manual ? 'runCompaction() with the session as input' : 'automatic, previous_response_id'}`,
      scenario: `${inputs.length + 1} runs, ${compactions.size} compactions; user messages kept verbatim, early facts recalled`, result: 'pass',
    });
  }
});
