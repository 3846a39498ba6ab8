// The Vercel AI SDK's OpenAI-compatible chat provider (ai + @ai-sdk/openai-compatible) against
// respgate's Chat Completions front door (docs/chat-completions.md): a tool over two steps,
// generateText and streamText. This provider sends reasoning_content back on assistant messages
// itself, so the plain run checks the SDK's round trip; run with "hidden" against a respgate with
// --reasoning-exposure hidden, the SDK never sees reasoning and resends only the visible history,
// so the simulator's answer on step 2 proves the front door replayed step 1's reasoning.
// Usage: node aisdk-chat.mjs [hidden]
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, stepCountIs, streamText } from 'ai';
import { weather } from './aisdk-lib.mjs';
import { assert, apiKey, baseURL, main, model, report, version, withTimeout } from './lib.mjs';

const hidden = process.argv[2] === 'hidden';
const provider = createOpenAICompatible({ name: 'respgate', baseURL, apiKey, includeUsage: true });
const client_ = `ai ${version('ai')} + @ai-sdk/openai-compatible ${version('@ai-sdk/openai-compatible')}`;

const { tools } = weather;

function check(steps, text) {
  assert.equal(weather.calls, 1, 'the tool ran ' + weather.calls + ' times');
  assert.equal(steps.length, 2, `${steps.length} steps`);
  assert.equal(steps[0].toolCalls[0]?.toolName, 'get_weather');
  if (hidden) {
    assert.ok(!steps[0].reasoningText, 'hidden mode showed reasoning: ' + steps[0].reasoningText);
  } else {
    assert.ok(steps[0].reasoningText, 'step 1 shows no reasoning (reasoning_content)');
  }
  assert.ok(text.includes('Tool said: '), text);
  // Step 2's model saw step 1's reasoning: sent back by the SDK, or (hidden) put back by respgate.
  assert.ok(text.includes('1 reasoning items'), 'step 2 did not see step 1\'s reasoning: ' + text);
}

await main(async () => {
  {
    weather.calls = 0;
    const r = await withTimeout('generateText', 30_000, generateText({
      model: provider.chatModel(model), tools, stopWhen: stepCountIs(3), maxRetries: 0,
      prompt: 'call get_weather for Tunis',
    }));
    check(r.steps, r.text);
    report({ client: client_, mode: 'non-stream', tools: 'function', continuation: hidden ? 'visible chat history (hidden reasoning), replayed by respgate' : 'chat history with reasoning_content', scenario: 'chat generateText, 2 steps; step 2 saw 1 reasoning item', result: 'pass' });
  }
  {
    weather.calls = 0;
    const s = streamText({
      model: provider.chatModel(model), tools, stopWhen: stepCountIs(3), maxRetries: 0,
      prompt: 'call get_weather for Quito',
      onError: ({ error }) => { throw error; },
    });
    let text = '';
    await withTimeout('streamText', 30_000, (async () => {
      for await (const part of s.fullStream) {
        if (part.type === 'text-delta') text += part.text;
        if (part.type === 'error') throw part.error;
      }
    })());
    check(await s.steps, text);
    report({ client: client_, mode: 'stream', tools: 'function', continuation: hidden ? 'visible chat history (hidden reasoning), replayed by respgate' : 'chat history with reasoning_content', scenario: 'chat streamText, 2 steps; step 2 saw 1 reasoning item', result: 'pass' });
  }
});
