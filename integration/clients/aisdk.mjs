// The Vercel AI SDK (ai + @ai-sdk/openai, Responses API) with a tool over two steps, generateText
// and streamText. On step 2 it replays the stored reasoning item as {"type":"item_reference"}.
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText } from 'ai';
import { weather } from './aisdk-lib.mjs';
import { assert, apiKey, baseURL, main, model, report, version, withTimeout } from './lib.mjs';

const openai = createOpenAI({ baseURL, apiKey });
const client_ = `ai ${version('ai')} + @ai-sdk/openai ${version('@ai-sdk/openai')}`;

const { tools } = weather;

await main(async () => {
  {
    weather.calls = 0;
    const r = await withTimeout('generateText', 30_000, generateText({
      model: openai.responses(model), tools, stopWhen: stepCountIs(3), maxRetries: 0,
      prompt: 'call get_weather for Tunis',
    }));
    assert.equal(weather.calls, 1, 'the tool ran ' + weather.calls + ' times');
    assert.equal(r.steps.length, 2, `${r.steps.length} steps`);
    assert.equal(r.steps[0].toolCalls[0]?.toolName, 'get_weather');
    assert.ok(r.text.includes('Tool said: '), r.text);
    assert.ok(r.text.includes('windy in'), r.text);
    report({ client: client_, mode: 'non-stream', tools: 'function', continuation: 'full history + item_reference', scenario: 'generateText, 2 steps', result: 'pass' });
  }
  {
    weather.calls = 0;
    const s = streamText({
      model: openai.responses(model), tools, stopWhen: stepCountIs(3), maxRetries: 0,
      prompt: 'call get_weather for Quito',
      onError: ({ error }) => { throw error; },
    });
    let text = '';
    let errors = 0;
    await withTimeout('streamText', 30_000, (async () => {
      for await (const part of s.fullStream) {
        if (part.type === 'text-delta') text += part.text;
        if (part.type === 'error') errors++;
      }
    })());
    const steps = await s.steps;
    assert.equal(errors, 0, 'error parts in the stream');
    assert.equal(weather.calls, 1, 'the tool ran ' + weather.calls + ' times');
    assert.equal(steps.length, 2, `${steps.length} steps`);
    assert.ok(text.includes('Tool said: '), text);
    assert.equal(text, await s.text);
    report({ client: client_, mode: 'stream', tools: 'function', continuation: 'full history + item_reference', scenario: 'streamText, 2 steps', result: 'pass' });
  }
});
