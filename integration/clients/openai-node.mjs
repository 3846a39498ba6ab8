// openai-node (npm "openai"): the responses.stream() helper, finalResponse(), retrieve,
// inputItems pagination, conversations, the GET ?stream=true replay, a stateless (store:false)
// session that keeps only respgate's encrypted_content of each reasoning item, background mode
// (create, poll, stream resume), and responses.compact() whose output is the next turn's
// input, against respgate.
// Usage: node openai-node.mjs <package>, where <package> is "openai" (7.x) or "openai-v6" (6.x).
import { assert, apiKey, sleep, baseURL, functionCalls, main, model, report, seenReasoning, streamTurn as streamTurnWith, version, weatherTool, withTimeout } from './lib.mjs';

const pkg = process.argv[2] ?? 'openai';
const { default: OpenAI } = await import(pkg);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const client_ = `openai-node ${version(pkg)}`;

const streamTurn = (params) => streamTurnWith(client, params);

await main(async () => {
  // 1. A streamed text turn: the helper accepts every event and finalResponse() has the output.
  {
    const { final, events, deltas } = await withTimeout('stream', 30_000, streamTurn({ model, input: 'Say hello. remember: the code is 42' }));
    assert.equal(final.status, 'completed');
    assert.ok(events >= 5, `only ${events} events`);
    assert.ok(final.output_text.includes('the code is 42'), final.output_text);
    assert.equal(final.output_text, deltas, 'finalResponse() text differs from the streamed deltas');
    assert.ok(final.output.some((it) => it.type === 'reasoning'), 'no reasoning item');
    report({ client: client_, mode: 'stream', tools: 'none', continuation: 'none', scenario: 'responses.stream + finalResponse', result: 'pass' });
  }

  // 2. A tool call streamed, then its output sent with previous_response_id, streamed again.
  let chainID;
  {
    const first = (await streamTurn({ model, input: 'call get_weather for Paris', tools: [weatherTool] })).final;
    const calls = functionCalls(first);
    assert.equal(calls.length, 1, 'want one function call');
    assert.equal(calls[0].name, 'get_weather');
    assert.ok(calls[0].call_id.startsWith('call_'), calls[0].call_id);
    JSON.parse(calls[0].arguments);
    const second = (await streamTurn({
      model, previous_response_id: first.id, tools: [weatherTool],
      input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: 'sunny, 21 C' }],
    })).final;
    assert.equal(second.status, 'completed');
    assert.ok(second.output_text.includes('Tool said: sunny, 21 C'), second.output_text);
    assert.equal(second.previous_response_id, first.id);
    chainID = second.id;
    report({ client: client_, mode: 'stream', tools: 'function', continuation: 'previous_response_id', scenario: 'tool call, output, answer', result: 'pass' });
  }

  // 3. Non-streamed: create with a tool, answer it, retrieve both.
  {
    const first = await client.responses.create({ model, input: 'call get_weather for Rome', tools: [weatherTool] });
    const call = functionCalls(first)[0];
    assert.ok(call, 'no function call');
    const second = await client.responses.create({
      model, previous_response_id: first.id, tools: [weatherTool],
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'rain' }],
    });
    assert.ok(second.output_text.includes('Tool said: rain'), second.output_text);
    const again = await client.responses.retrieve(second.id);
    assert.equal(again.id, second.id);
    assert.deepEqual(again.output, second.output);
    assert.equal(again.output_text, second.output_text);
    report({ client: client_, mode: 'non-stream', tools: 'function', continuation: 'previous_response_id', scenario: 'create, retrieve', result: 'pass' });
  }

  // 4. The stored stream replayed by the helper (GET ?stream=true).
  {
    const stream = client.responses.stream({ response_id: chainID });
    for await (const _ of stream) { /* the helper checks each event */ }
    const final = await stream.finalResponse();
    assert.equal(final.id, chainID);
    assert.ok(final.output_text.includes('Tool said'), final.output_text);
    report({ client: client_, mode: 'stream (GET replay)', tools: 'function', continuation: 'response_id', scenario: 'responses.stream({response_id})', result: 'pass' });
  }

  // 5. inputItems pagination across pages, in both orders.
  {
    const input = Array.from({ length: 23 }, (_, i) => ({ role: 'user', content: `message ${i}` }));
    const r = await client.responses.create({ model, input, previous_response_id: chainID });
    const seen = [];
    for await (const item of client.responses.inputItems.list(r.id, { limit: 5, order: 'asc' })) seen.push(item);
    // The chain's history (2 turns: input + output each) comes before the 23 new messages.
    assert.ok(seen.length >= 23, `${seen.length} input items`);
    assert.equal(new Set(seen.map((it) => it.id)).size, seen.length, 'duplicate ids across pages');
    const texts = seen.filter((it) => it.type === 'message' && it.role === 'user').map((it) => it.content[0].text);
    assert.deepEqual(texts.slice(-23), input.map((m) => m.content));
    const desc = [];
    for await (const item of client.responses.inputItems.list(r.id, { limit: 7 })) desc.push(item.id);
    assert.deepEqual(desc, seen.map((it) => it.id).reverse());
    report({ client: client_, mode: 'non-stream', tools: 'none', continuation: 'previous_response_id', scenario: `inputItems pagination (${seen.length} items, pages of 5/7, asc/desc)`, result: 'pass' });
  }

  // 6. Conversations: create with items, a streamed and a non-streamed turn, a tool round trip,
  // list items with pagination.
  {
    const conv = await client.conversations.create({ items: [{ type: 'message', role: 'user', content: 'remember: the sky is green' }], metadata: { suite: 'compat' } });
    assert.ok(conv.id.startsWith('conv_'));
    const first = (await streamTurn({ model, conversation: conv.id, input: 'call get_weather for Oslo', tools: [weatherTool] })).final;
    assert.equal(first.conversation?.id, conv.id);
    const call = functionCalls(first)[0];
    assert.ok(call, 'no function call');
    const second = await client.responses.create({
      model, conversation: conv.id, tools: [weatherTool],
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'snow' }],
    });
    assert.ok(second.output_text.includes('Tool said: snow'), second.output_text);
    const third = (await streamTurn({ model, conversation: { id: conv.id }, input: 'what do you know?' })).final;
    assert.ok(third.output_text.includes('the sky is green'), third.output_text);
    const items = [];
    for await (const item of client.conversations.items.list(conv.id, { limit: 3, order: 'asc' })) items.push(item);
    assert.ok(items.length >= 9, `${items.length} conversation items`);
    assert.equal(new Set(items.map((it) => it.id)).size, items.length, 'duplicate ids across pages');
    assert.equal(items[0].content[0].text, 'remember: the sky is green');
    const got = await client.conversations.retrieve(conv.id);
    assert.deepEqual(got.metadata, { suite: 'compat' });
    report({ client: client_, mode: 'stream + non-stream', tools: 'function', continuation: 'conversation', scenario: `conversations: create, 3 turns, items pagination (${items.length})`, result: 'pass' });
  }

  // 7. Stateless, the ZDR way: store:false with include reasoning.encrypted_content, the client
  // keeps its own history and of each reasoning item only id + encrypted_content (content
  // stripped), and sends everything back each turn, streamed and not in turn. respgate opens its
  // blobs and replays the plaintext to the model, whose answer counts the reasoning items it saw:
  // turn N must have seen the N-1 earlier ones.
  {
    const history = [];
    const seen = [];
    for (let turn = 1; turn <= 5; turn++) {
      history.push({ role: 'user', content: `question ${turn}` });
      const params = { model, store: false, include: ['reasoning.encrypted_content'], input: history };
      const r = turn % 2 ? (await streamTurn(params)).final : await client.responses.create(params);
      assert.equal(r.status, 'completed');
      seen.push(seenReasoning(r.output_text));
      assert.equal(seen.at(-1), turn - 1, `turn ${turn}: ${r.output_text}`);
      for (const it of r.output) {
        if (it.type !== 'reasoning') {
          history.push(it);
          continue;
        }
        assert.ok(it.encrypted_content?.startsWith('rgr1.'), `turn ${turn}: reasoning item without respgate's blob: ${JSON.stringify(it)}`);
        if (turn > 1) assert.ok(it.content[0].text.includes(`Prior reasoning: "Thinking about "question ${turn - 1}`), it.content[0].text);
        history.push({ type: 'reasoning', id: it.id, summary: [], encrypted_content: it.encrypted_content });
      }
    }
    report({ client: client_, mode: 'stream + non-stream', tools: 'none', continuation: 'full history, store:false', scenario: `5 turns keeping only encrypted_content; reasoning items seen per turn: ${seen.join(',')}`, result: 'pass' });
  }

  // 8. Background mode: create answers queued at once; retrieve polls it to completed; the stored
  // stream (retrieve with stream:true) replays every event with its sequence number and resumes
  // from every starting_after with nothing lost or repeated; a stream resumed while the turn
  // runs follows it to its end.
  {
    const terminal = (r) => ['completed', 'incomplete', 'failed', 'cancelled'].includes(r.status);
    const poll = async (id, done) => {
      for (let r = await client.responses.retrieve(id); ; r = await client.responses.retrieve(id)) {
        if (done(r)) return r;
        await sleep(25);
      }
    };
    const collect = async (id, after) => {
      const params = after === undefined ? { stream: true } : { stream: true, starting_after: after };
      const events = [];
      for await (const ev of await client.responses.retrieve(id, params)) events.push(ev);
      return events;
    };
    const seqs = (evs) => evs.map((e) => `${e.sequence_number}:${e.type}`);

    const created = await client.responses.create({ model: `${model}?delay_ms=10&tokens=30`, input: 'in the background: remember: the code is 7', background: true });
    assert.equal(created.status, 'queued');
    assert.equal(created.background, true);
    const done = await withTimeout('poll', 60_000, poll(created.id, terminal));
    assert.equal(done.status, 'completed');
    assert.ok(done.output_text.includes('the code is 7'), done.output_text);
    const full = await collect(created.id);
    assert.equal(full[0].type, 'response.created');
    assert.equal(full.at(-1).type, 'response.completed');
    full.forEach((ev, i) => assert.equal(ev.sequence_number, i, `full replay: event ${i} is #${ev.sequence_number} ${ev.type}`));
    assert.deepEqual(full.at(-1).response.output, done.output);
    for (let after = 0; after < full.length; after++) {
      assert.deepEqual(seqs(await collect(created.id, after)), seqs(full.slice(after + 1)), `starting_after=${after}`);
    }

    const running = await client.responses.create({ model: `${model}?delay_ms=30&tokens=60`, input: 'in the background, slowly', background: true });
    await withTimeout('start', 60_000, poll(running.id, (r) => r.status !== 'queued'));
    const resumed = await withTimeout('resume', 60_000, collect(running.id, 2));
    assert.equal(resumed[0]?.sequence_number, 3, `resumed at ${resumed[0]?.sequence_number}`);
    assert.equal(resumed.at(-1).type, 'response.completed');
    assert.deepEqual(seqs(resumed), seqs((await collect(running.id)).slice(3)));
    report({ client: client_, mode: 'background + stream (GET replay)', tools: 'none', continuation: 'response_id', scenario: `background: create, poll retrieve, stream resumed from each of ${full.length} starting_after, and while running`, result: 'pass' });
  }

  // 9. Compaction, the OpenAI pattern (docs/compaction.md §5): compact a stored chain with
  // responses.compact(), send its output (plus a new message) as the next request's input without
  // previous_response_id, streamed through the strict helper: the turn completes and the model
  // still knows the first turns' facts, through the summary the compaction item carries.
  {
    const facts = ['the vault code is 4417', 'the cat is called Miso', 'deploy on Friday'];
    let prev;
    for (const input of [...facts.map((f) => `remember: ${f}`), 'what is next?']) {
      prev = (await client.responses.create({ model, input, ...(prev ? { previous_response_id: prev } : {}) })).id;
    }
    const compacted = await client.responses.compact({ model, previous_response_id: prev });
    assert.equal(compacted.object, 'response.compaction');
    const items = compacted.output.filter((it) => it.type === 'compaction');
    assert.equal(items.length, 1, `want one compaction item: ${JSON.stringify(compacted.output)}`);
    assert.ok(items[0].id.startsWith('cmp_'), items[0].id);
    assert.ok(items[0].encrypted_content.startsWith('rgr1.'), 'compaction item without respgate\'s blob');
    // OpenAI's window: every user message, verbatim and in order, then the one compaction item.
    const users = compacted.output.filter((it) => it.type === 'message' && it.role === 'user');
    assert.equal(users.length, 4, 'want every user message kept');
    assert.ok(JSON.stringify(users[0]).includes(facts[0]), 'the first user message is not kept verbatim');
    assert.equal(compacted.output.at(-1).type, 'compaction', 'the compaction item is not last');
    assert.ok(compacted.usage.output_tokens > 0, JSON.stringify(compacted.usage));
    const next = (await streamTurn({ model, input: [...compacted.output, { role: 'user', content: 'what do you remember?' }] })).final;
    assert.equal(next.status, 'completed');
    for (const f of facts) assert.ok(next.output_text.includes(f), `forgot "${f}": ${next.output_text}`);
    // And the stored turn continues with previous_response_id through the compaction item.
    const after = await client.responses.create({ model, previous_response_id: next.id, input: 'and now?' });
    assert.ok(after.output_text.includes(facts[0]), after.output_text);
    report({ client: client_, mode: 'non-stream + stream', tools: 'none', continuation: 'compact output as input', scenario: `responses.compact (${compacted.output.length} items), next turn streamed, then chained`, result: 'pass' });
  }
});
