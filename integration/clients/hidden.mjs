// openai-node against a respgate started with --reasoning-exposure hidden: the strict stream helper
// (responses.stream() + finalResponse()) must accept streams whose reasoning items carry no text
// (no reasoning_text events, summary [], no content, respgate's encrypted_content), a stateless
// client must continue from those items alone, and the model's reasoning ("Thinking about …", only
// the simulator's reasoning says that) must reach the client nowhere. The runner
// (compat_test.go) checks the last point on every byte too.
// Usage: node hidden.mjs <package>, where <package> is "openai" (7.x) or "openai-v6" (6.x).
import { assert, apiKey, baseURL, main, model, report, seenReasoning, streamTurn, version, withTimeout } from './lib.mjs';

const pkg = process.argv[2] ?? 'openai';
const { default: OpenAI } = await import(pkg);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const client_ = `openai-node ${version(pkg)}`;
const canary = 'Thinking about';

function assertHidden(what, value) {
  const json = JSON.stringify(value);
  assert.ok(!json.includes(canary) && !json.includes('reasoning_text'), `${what} shows reasoning: ${json}`);
}

function assertHiddenItems(what, response) {
  assertHidden(what, response);
  const reasoning = response.output.filter((it) => it.type === 'reasoning');
  assert.equal(reasoning.length, 1, `${what}: ${reasoning.length} reasoning items`);
  for (const it of reasoning) {
    assert.deepEqual(it.summary, [], `${what}: summary ${JSON.stringify(it.summary)}`);
    assert.equal(it.content, undefined, `${what}: content ${JSON.stringify(it.content)}`);
    assert.ok(it.encrypted_content?.startsWith('rgr1.'), `${what}: no encrypted_content`);
  }
}

// hiddenTurn streams one turn through the strict helper and checks every event it passes on.
async function hiddenTurn(what, params) {
  const { final, events } = await withTimeout(what, 30_000, streamTurn(client, params, (ev) => {
    assert.ok(!ev.type.startsWith('response.reasoning'), `${what}: event ${ev.type}`);
    assertHidden(`${what}: ${ev.type}`, ev);
  }));
  assert.equal(final.status, 'completed');
  assertHiddenItems(what, final);
  return { final, events };
}

await main(async () => {
  // 1. Stateless: store:false, the client sends back each turn's output as it got it (hidden
  // reasoning items included); the model's answer counts the reasoning items that reached it.
  {
    const history = [];
    const seen = [];
    for (let turn = 1; turn <= 3; turn++) {
      history.push({ role: 'user', content: `question ${turn}` });
      const { final } = await hiddenTurn(`turn ${turn}`, { model, store: false, input: history });
      seen.push(seenReasoning(final.output_text));
      assert.equal(seen.at(-1), turn - 1, `turn ${turn}: ${final.output_text}`);
      history.push(...final.output);
    }
    report({ client: client_, mode: 'stream (hidden reasoning)', tools: 'none', continuation: 'full history, store:false', scenario: `responses.stream + finalResponse, 3 turns; reasoning items seen per turn: ${seen.join(',')}`, result: 'pass' });
  }

  // 2. Stored: previous_response_id replays the stored plaintext to the model; retrieve and the
  // helper's GET replay (responses.stream({response_id})) hide it too.
  {
    const { final: first } = await hiddenTurn('stored turn 1', { model, input: 'remember: the door is blue' });
    const { final: second } = await hiddenTurn('stored turn 2', { model, previous_response_id: first.id, input: 'which door?' });
    assert.equal(seenReasoning(second.output_text), 1, second.output_text);
    assertHiddenItems('retrieve', await client.responses.retrieve(second.id));
    const replay = client.responses.stream({ response_id: second.id });
    for await (const ev of replay) assertHidden(`GET replay ${ev.type}`, ev);
    const again = await replay.finalResponse();
    assert.equal(again.id, second.id);
    assertHiddenItems('GET replay', again);
    report({ client: client_, mode: 'stream (hidden reasoning) + GET replay', tools: 'none', continuation: 'previous_response_id', scenario: 'stored plaintext replayed to the model, hidden from retrieve and the replay', result: 'pass' });
  }
});
