// The function tool both AI SDK scripts (aisdk.mjs, aisdk-chat.mjs) give the model; weather.calls
// counts how often the SDK ran it.
import { tool } from 'ai';
import { z } from 'zod';

export const weather = {
  calls: 0,
  tools: {
    get_weather: tool({
      description: 'Current weather of a city.',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        weather.calls++;
        return `windy in ${city}`;
      },
    }),
  },
};
