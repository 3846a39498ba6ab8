// Shared helpers of the compat scripts. Each script talks to the respgate the runner
// (compat_test.go) started, at OPENAI_BASE_URL, and prints one "COMPAT {json}" line per
// scenario it passed; any failure throws, so the process exits non-zero.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';

export { assert };

export const baseURL = process.env.OPENAI_BASE_URL;
export const apiKey = process.env.OPENAI_API_KEY ?? 'compat-key';
export const model = process.env.RESPGATE_MODEL ?? 'openai/gpt-oss-sim';
if (!baseURL) throw new Error('OPENAI_BASE_URL is not set: run through `make compat`');

// version returns the installed version of an npm package (from its package.json; not through
// require, which a package's "exports" may not allow).
export function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

// report prints one row of the compatibility table.
export function report(row) {
  console.log('COMPAT ' + JSON.stringify(row));
}

// The function tool every script uses. The simulator calls a tool when the last user text says
// "call <name>" and answers "... Tool said: <output>." once the input ends with its output.
export const weatherTool = {
  type: 'function',
  name: 'get_weather',
  description: 'Current weather of a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
};

// streamTurn runs one streamed turn through openai-node's strict helper (responses.stream(), which
// checks item ids, indices and the response's identity), counting its events.
export async function streamTurn(client, params, onEvent = () => {}) {
  const stream = client.responses.stream(params);
  let events = 0;
  let deltas = '';
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  for await (const event of stream) {
    events++;
    onEvent(event);
  }
  const final = await stream.finalResponse();
  return { final, events, deltas };
}

// seenReasoning reads how many reasoning items reached the model from the simulator's answer
// ("Seen <m> messages, <r> reasoning items, ...", upstream/vllmsim/doc.go).
export function seenReasoning(text) {
  const m = /Seen \d+ messages, (\d+) reasoning items/.exec(text);
  if (!m) throw new Error(`not a simulator answer: ${text}`);
  return Number(m[1]);
}

export function functionCalls(response) {
  return response.output.filter((it) => it.type === 'function_call');
}

// sleep waits ms milliseconds (a poll's pause).
export const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// withTimeout fails a scenario that hangs (a client looping on a bad answer, for example).
export async function withTimeout(name, ms, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${name}: no result after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export async function main(fn) {
  try {
    await fn();
  } catch (err) {
    console.error(err?.stack ?? err);
    process.exit(1);
  }
}
