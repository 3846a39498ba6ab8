// openai-node's WebSocket mode (openai 7.59: ResponsesWS from "openai/resources/responses/ws" and
// its lane router ResponsesWebSocketSession from "openai/lib/responses/responses-websocket-session"),
// against respgate: two lanes (stream_id) on one socket running at once, creates on one lane
// queued FIFO, steering a running response (accepted, cut at a boundary, the successor on the
// same lane, readable over HTTP), steering that waits for a function call's output
// (response.steer.pending, then the tool loop finished on the same socket with the queued input
// prepended), a generate:false warm-up and store:false continuations on the socket, and a new
// socket that cannot continue them.
// The SDK's types (resources/responses/responses.d.ts) are the contract.
// Usage: node ws.mjs
import { assert, apiKey, baseURL, functionCalls, main, model, report, version, weatherTool, withTimeout } from './lib.mjs';

const { default: OpenAI } = await import('openai');
const { ResponsesWS } = await import('openai/resources/responses/ws');
const { ResponsesWebSocketSession } = await import('openai/lib/responses/responses-websocket-session');
const { WebSocketError } = await import('openai/resources/responses/internal-base');

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const client_ = `openai-node ${version('openai')}`;
const limits = { maxLanes: 8, maxBufferedEvents: 10_000, maxBufferedBytes: 64 << 20 };

// connect opens a ResponsesWS and its lane router, and records every event it receives, in
// order, for the assertions that span lanes.
async function connect() {
  const ws = new ResponsesWS(client);
  const events = [];
  ws.on('event', (e) => events.push(e));
  ws.on('error', () => {}); // error events reach the lanes; an unhandled one would throw
  await withTimeout('open', 10_000, new Promise((resolve, reject) => {
    ws.socket.on('open', resolve);
    ws.socket.on('error', reject);
  }));
  return { ws, events, session: new ResponsesWebSocketSession(ws, limits) };
}

// until reads a lane's events until one of type typ and returns it with those before it.
async function until(lane, typ) {
  const seen = [];
  for (;;) {
    const e = await lane.receive();
    if (e.type === typ) return { event: e, seen };
    if (e.type === 'error') throw new Error(`lane ${lane.streamID}: error event ${JSON.stringify(e)}`);
    seen.push(e);
  }
}

// facts reads the simulator's "Facts: a; b." (the "remember:" texts the model saw, upstream/vllmsim/doc.go).
function facts(response) {
  const m = /Facts: ([^.]*)\./.exec(response.output_text);
  return m ? m[1] : '';
}

// Every event of a lane's responses, its steering events included, echo its stream_id.
function assertEchoes(events, id, streamID) {
  const mine = events.filter((e) => e.response?.id === id || e.steer?.previous_response_id === id);
  assert.ok(mine.length > 0, `no event of ${id}`);
  for (const e of mine) assert.equal(e.stream_id, streamID, `${e.type} of ${id}`);
}

await main(async () => {
  const { ws, events, session } = await connect();

  // 1. Lanes: lane a runs a response that pauses mid-reasoning, with a second create queued
  // behind it; lane b's response starts and ends while a is paused.
  {
    const a = session.lane('a');
    const b = session.lane('b');
    a.create({ model: `${model}?stall=3s&stall_after=5`, input: 'remember: a1' });
    a.create({ model, input: 'remember: a2' });
    await withTimeout('lane a starts', 30_000, until(a, 'response.reasoning_text.delta'));
    b.create({ model, input: 'remember: b1' });
    const b1 = await withTimeout('lane b', 30_000, b.finalResponse());
    const a1 = await withTimeout('lane a first', 30_000, a.finalResponse());
    const a2 = await withTimeout('lane a second', 30_000, a.finalResponse());
    assert.deepEqual([a1, a2, b1].map((r) => [r.status, facts(r)]), [['completed', 'a1'], ['completed', 'a2'], ['completed', 'b1']]);
    const at = (id, typ) => events.findIndex((e) => e.type === typ && e.response?.id === id);
    assert.ok(at(b1.id, 'response.completed') < at(a1.id, 'response.completed'), 'lane b waited for lane a');
    assert.ok(at(a1.id, 'response.completed') < at(a2.id, 'response.created'), 'lane a ran its two creates at once');
    for (const [r, lane] of [[a1, 'a'], [a2, 'a'], [b1, 'b']]) assertEchoes(events, r.id, lane);
    // A lane may fork from a response made on another lane.
    const c = session.lane('c');
    c.create({ model, previous_response_id: a1.id, input: 'what do you know?' });
    const fork = await withTimeout('lane c', 30_000, c.finalResponse());
    assert.equal(facts(fork), 'a1');
    assert.equal(fork.previous_response_id, a1.id);
    assertEchoes(events, fork.id, 'c');
    report({ client: client_, mode: 'WebSocket (ResponsesWS, 3 lanes)', tools: 'none', continuation: 'previous_response_id across lanes', scenario: 'lanes run at once, FIFO within a lane, stream_id echoed, a lane forks another', result: 'pass' });
  }

  // 2. Steering: the response is cut at the end of its reasoning item and its successor runs
  // on the same lane with the steering input; both are stored responses.
  {
    const s = session.lane('s');
    s.create({ model: `${model}?stall=3s&stall_after=5`, instructions: 'be brief', input: 'remember: owls hoot' });
    const { event: created } = await withTimeout('steered starts', 30_000, until(s, 'response.created'));
    const id = created.response.id;
    await withTimeout('steered reasons', 30_000, until(s, 'response.reasoning_text.delta'));
    ws.send({ type: 'response.steer', previous_response_id: id, input: 'remember: go left' });
    const { event: accepted } = await withTimeout('accepted', 30_000, until(s, 'response.steer.accepted'));
    assert.equal(accepted.steer.previous_response_id, id);
    assert.ok(accepted.steer.id.startsWith('steer_'), accepted.steer.id);
    assert.equal(typeof accepted.sequence_number, 'number');
    const cut = await withTimeout('steered ends', 30_000, s.finalResponse());
    assert.equal(cut.id, id);
    assert.equal(cut.status, 'incomplete');
    assert.equal(cut.incomplete_details?.reason, 'steered');
    assert.deepEqual(cut.output.map((it) => [it.type, it.status]), [['reasoning', 'completed']]);
    const next = await withTimeout('successor', 30_000, s.finalResponse());
    assert.equal(next.status, 'completed');
    assert.equal(next.previous_response_id, id);
    assert.equal(next.instructions, 'be brief', 'the successor inherits the settings');
    assert.equal(facts(next), 'owls hoot; go left');
    assertEchoes(events, id, 's');
    assertEchoes(events, next.id, 's');
    const [storedCut, storedNext] = await Promise.all([client.responses.retrieve(id), client.responses.retrieve(next.id)]);
    assert.equal(storedCut.status, 'incomplete');
    assert.equal(storedCut.incomplete_details?.reason, 'steered');
    assert.equal(storedNext.previous_response_id, id);
    assert.equal(storedNext.output_text, next.output_text);
    const more = await client.responses.create({ model, previous_response_id: next.id, input: 'and?' });
    assert.equal(facts(more), 'owls hoot; go left');
    report({ client: client_, mode: 'WebSocket (ResponsesWS)', tools: 'none', continuation: 'steered successor, then HTTP', scenario: 'response.steer: accepted, incomplete "steered", successor on the lane, retrieve + continue over HTTP', result: 'pass' });
  }

  // 3. Steering a response that ends with a function call: the input waits (steer.pending
  // after response.completed), and the tool loop finishes on the same socket with it prepended.
  {
    const t = session.lane('t');
    t.create({ model: `${model}?reasoning=0&stall=3s&stall_after=4`, tools: [weatherTool], input: 'call get_weather for Paris' });
    const { event: created } = await withTimeout('tool turn starts', 30_000, until(t, 'response.created'));
    const id = created.response.id;
    await withTimeout('arguments', 30_000, until(t, 'response.function_call_arguments.delta'));
    ws.send({ type: 'response.steer', previous_response_id: id, input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'remember: use metric' }] }] });
    const { event: accepted } = await withTimeout('accepted', 30_000, until(t, 'response.steer.accepted'));
    const { event: completed } = await withTimeout('tool turn ends', 30_000, until(t, 'response.completed'));
    const call = functionCalls(completed.response)[0];
    assert.ok(call, 'no function call');
    const { event: pending, seen } = await withTimeout('pending', 30_000, until(t, 'response.steer.pending'));
    assert.deepEqual(seen, [], 'steer.pending must follow response.completed');
    assert.equal(pending.reason, 'waiting_for_required_input');
    assert.deepEqual(pending.steer, { id: accepted.steer.id, previous_response_id: id });
    assert.deepEqual(pending.required_input, [{ type: 'function_call_output', call_id: call.call_id, name: 'get_weather' }]);
    assert.equal(pending.stream_id, 't');
    // Fill the stubs (the SDK's instructions) and continue on the same lane.
    const outputs = pending.required_input.map((stub) => ({ ...stub, output: 'sunny, 21 C' }));
    t.create({ model, tools: [weatherTool], previous_response_id: id, input: outputs });
    const answer = await withTimeout('tool answer', 30_000, t.finalResponse());
    assert.equal(answer.status, 'completed');
    assert.ok(answer.output_text.includes('Tool said: sunny, 21 C'), answer.output_text);
    assert.equal(facts(answer), 'use metric', 'the queued steering input was not prepended');
    const items = [];
    for await (const it of client.responses.inputItems.list(answer.id, { order: 'asc' })) items.push(it);
    const kinds = items.slice(-2).map((it) => it.type === 'message' ? `${it.role}:${it.content[0].text}` : it.type);
    assert.deepEqual(kinds, ['user:remember: use metric', 'function_call_output'], 'steering input first, then the tool output');
    report({ client: client_, mode: 'WebSocket (ResponsesWS)', tools: 'function', continuation: 'previous_response_id on the lane', scenario: 'response.steer.pending after a function call, stubs filled, queued input prepended', result: 'pass' });
  }

  // 4. store:false continues on its socket; 5. a new socket cannot continue it.
  let ephemeral;
  {
    const d = session.lane();
    // A warm-up first (generate:false): no output, and its id continues like any response's.
    d.create({ model, store: false, generate: false, instructions: 'be brief', input: 'remember: the sky is green' });
    const warm = await withTimeout('warm-up', 30_000, d.finalResponse());
    assert.equal(warm.status, 'completed');
    assert.deepEqual(warm.output, []);
    d.create({ model, store: false, previous_response_id: warm.id, input: 'remember: the grass is blue' });
    ephemeral = await withTimeout('store:false', 30_000, d.finalResponse());
    d.create({ model, store: false, previous_response_id: ephemeral.id, input: 'what do you know?' });
    const next = await withTimeout('store:false continued', 30_000, d.finalResponse());
    assert.equal(facts(next), 'the sky is green; the grass is blue');
    assert.ok(events.filter((e) => e.response?.id === ephemeral.id).every((e) => !('stream_id' in e)), 'the default lane echoes no stream_id');
    report({ client: client_, mode: 'WebSocket (ResponsesWS, default lane)', tools: 'none', continuation: 'store:false, previous_response_id', scenario: 'generate:false warm-up, store:false continued twice on its socket', result: 'pass' });
  }
  session.close();
  ws.close({ code: 1000, reason: 'done' });
  {
    const other = await connect();
    const d = other.session.lane();
    d.create({ model, store: false, previous_response_id: ephemeral.id, input: 'what do you know?' });
    const err = await withTimeout('new socket', 30_000, d.finalResponse().then(() => null, (e) => e));
    assert.ok(err instanceof WebSocketError, `want a WebSocketError, got ${err}`);
    assert.equal(err.error?.status, 400);
    assert.deepEqual(err.error?.error && { code: err.error.error.code, param: err.error.error.param, type: err.error.error.type },
      { code: 'previous_response_not_found', param: 'previous_response_id', type: 'invalid_request_error' });
    // The socket stays open for the next turn.
    d.create({ model, store: false, input: 'remember: again' });
    assert.equal(facts(await withTimeout('after the error', 30_000, d.finalResponse())), 'again');
    other.session.close();
    other.ws.close({ code: 1000, reason: 'done' });
    report({ client: client_, mode: 'WebSocket (ResponsesWS, new socket)', tools: 'none', continuation: 'store:false from another socket', scenario: 'error event 400 previous_response_not_found, socket still usable', result: 'pass' });
  }
  const failed = events.filter((e) => e.type === 'response.steer.failed');
  assert.deepEqual(failed, [], 'a steer failed');
});
