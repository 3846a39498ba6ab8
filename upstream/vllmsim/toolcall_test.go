package vllmsim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// weatherTool is the Open Responses compliance suite's tool (its "tool-calling" test).
const weatherTool = `{"type":"function","name":"get_weather","description":"Get the current weather for a location",` +
	`"parameters":{"type":"object","properties":{"location":{"type":"string","description":"The city and state, e.g. San Francisco, CA"}},"required":["location"]}}`

// forecastTool has a rich schema: an enum, a bounded integer, a nullable string, an array of
// objects and a boolean, all required, and an optional member that is left out.
const forecastTool = `{"type":"function","name":"wx","description":"Forecast for a city, several days ahead",` +
	`"parameters":{"type":"object","additionalProperties":false,"properties":{` +
	`"city":{"type":"string"},` +
	`"unit":{"type":"string","enum":["celsius","fahrenheit"]},` +
	`"days":{"type":"integer","minimum":1,"maximum":7},` +
	`"note":{"type":["null","string"]},` +
	`"layers":{"type":"array","items":{"type":"object","properties":{"level":{"type":"number"},"kind":{"anyOf":[{"type":"null"},{"type":"string","enum":["wind","rain"]}]}},"required":["level","kind"]}},` +
	`"alerts":{"type":"boolean"},` +
	`"optional":{"type":"string"}},` +
	`"required":["city","unit","days","note","layers","alerts"]}}`

const stockTool = `{"type":"function","name":"stockPrice","parameters":{"type":"object","properties":{"symbol":{"type":"string"},"exchange":{"type":"string"}}}}`

// TestToolCallsFollowTheTopic: with function tools offered and no explicit trigger, the model calls
// the tools the user's message is about (a word of the tool's name or description), with arguments
// that fit each tool's schema; a message about nothing a tool names gets a text answer.
func TestToolCallsFollowTheTopic(t *testing.T) {
	srv, _ := newServer(t, Options{})
	tools := func(ts ...string) string { return `"tools":[` + strings.Join(ts, ",") + `]` }
	cases := []struct {
		name  string
		model string
		extra []string
		want  []string // outputTexts of the final response, reasoning left out
	}{
		{"a question about the weather calls get_weather with the place", HarmonyModel,
			[]string{tools(weatherTool), `"input":[{"type":"message","role":"user","content":"What's the weather like in San Francisco?"}]`},
			[]string{`call:get_weather{"location":"San Francisco"}`}},
		{"the parser path says what it calls first", ParserModel,
			[]string{tools(weatherTool), `"input":"Tell me the weather in Oslo, please."`},
			[]string{`message:Calling get_weather.`, `call:get_weather{"location":"Oslo"}`}},
		{"a plural names the tool too", HarmonyModel,
			[]string{tools(weatherTool), `"input":"how do weathers in spring compare"`},
			[]string{`call:get_weather{"location":"how do weathers in spring compare"}`}},
		{"a word of the description names the tool; every required member fits the schema", HarmonyModel,
			[]string{tools(weatherTool, forecastTool), `"input":"Forecast for Paris in fahrenheit, 3 days ahead"`},
			[]string{`call:wx{"city":"Paris","unit":"fahrenheit","days":3,"note":"Forecast for Paris in fahrenheit, 3 days ahead",` +
				`"layers":[{"level":3,"kind":"wind"}],"alerts":true}`}},
		{"a camelCase name is split into words; without required members the first property is filled", HarmonyModel,
			[]string{tools(weatherTool, stockTool), `"input":"what is the stock of ACME worth?"`},
			[]string{`call:stockPrice{"symbol":"what is the stock of ACME worth?"}`}},
		{"two tools the message is about are called in parallel", HarmonyModel,
			[]string{tools(weatherTool, forecastTool), `"input":"weather and forecast in Rome"`},
			[]string{`call:get_weather{"location":"Rome"}`, `call:wx{"city":"Rome","unit":"celsius","days":1,"note":"weather and forecast in Rome",` +
				`"layers":[{"level":1,"kind":"wind"}],"alerts":true}`}},
		{"parallel_tool_calls false keeps the first", HarmonyModel,
			[]string{tools(weatherTool, forecastTool), `"input":"weather and forecast in Rome","parallel_tool_calls":false`},
			[]string{`call:get_weather{"location":"Rome"}`}},
		{"a message about nothing a tool names is answered in text", HarmonyModel,
			[]string{tools(weatherTool, forecastTool), `"input":"Hello! remember: the sky is green"`},
			[]string{`message:Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: the sky is green.`}},
		{"generic words of a tool (get, current, list) do not name it", HarmonyModel,
			[]string{tools(weatherTool), `"input":"get me the current list for a"`},
			[]string{`message:Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: none.`}},
		{"tool_choice none answers in text", HarmonyModel,
			[]string{tools(weatherTool), `"input":"What's the weather like in San Francisco?","tool_choice":"none"`},
			[]string{`message:Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: none.`}},
		{"after the tool's output the model answers", HarmonyModel,
			[]string{tools(weatherTool), `"input":[{"role":"user","content":"What's the weather like in San Francisco?"},` +
				`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"location\":\"San Francisco\"}"},` +
				`{"type":"function_call_output","call_id":"c1","output":"fog, 14C"}]`},
			[]string{`message:Seen 1 messages, 0 reasoning items, 1 tool outputs. Facts: none. Tool said: fog, 14C.`}},
		{"an explicit call keeps the whole text in strings, and fits other types", HarmonyModel,
			[]string{tools(forecastTool), `"input":"call wx now"`},
			[]string{`call:wx{"city":"call wx now","unit":"celsius","days":1,"note":"call wx now","layers":[{"level":1,"kind":"wind"}],"alerts":true}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, srv, body(c.model, false, c.extra...))
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			resp := decode(t, r.raw)
			var got []string
			for _, s := range outputTexts(resp) {
				if !strings.HasPrefix(s, "reasoning:") {
					got = append(got, s)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("output\n got %q\nwant %q", got, c.want)
			}
			checkArgumentsFitSchemas(t, resp)
		})
	}
}

// checkArgumentsFitSchemas validates every function call's arguments against its tool's parameters
// (the tools echoed in the response).
func checkArgumentsFitSchemas(t *testing.T, resp map[string]any) {
	t.Helper()
	params := map[string]any{}
	for _, tool := range resp["tools"].([]any) {
		m := tool.(map[string]any)
		params[str(m["name"])] = m["parameters"]
	}
	for i, it := range resp["output"].([]any) {
		m := it.(map[string]any)
		if m["type"] != "function_call" {
			continue
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("tool.json", params[str(m["name"])]); err != nil {
			t.Fatal(err)
		}
		sch, err := c.Compile("tool.json")
		if err != nil {
			t.Fatal(err)
		}
		args, err := jsonschema.UnmarshalJSON(strings.NewReader(str(m["arguments"])))
		if err != nil {
			t.Fatalf("output[%d] arguments are not JSON: %v", i, err)
		}
		if err := sch.Validate(args); err != nil {
			t.Errorf("output[%d] arguments %s do not fit the schema: %v", i, m["arguments"], err)
		}
	}
}

func TestPlace(t *testing.T) {
	for in, want := range map[string]string{
		"What's the weather like in San Francisco?": "San Francisco",
		"weather in Paris in fahrenheit":            "Paris",
		"flights for New York, NY tomorrow":         "New York",
		"weather in spring":                         "",
		"Paris":                                     "",
		"look at it in   Rio!":                      "Rio",
	} {
		if got := place(in); got != want {
			t.Errorf("place(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestArgumentsWithoutASchema(t *testing.T) {
	for params, want := range map[string]string{
		``:                  `{"query":"v"}`,
		`null`:              `{"query":"v"}`,
		`{"type":"object"}`: `{"query":"v"}`,
		`{"type":"object","additionalProperties":false}`:                                        `{}`,
		`{"type":"object","properties":{"b":{"type":"integer","maximum":-2}}}`:                  `{"b":-2}`,
		`{"type":"object","required":["x"]}`:                                                    `{"x":"v"}`,
		`{"type":"object","required":["n"],"properties":{"n":{"type":"number","minimum":0.5}}}`: `{"n":2.5}`,
	} {
		tool := functionTool{name: "f", params: json.RawMessage(params)}
		if got := string(tool.arguments("v", "about 2.5 things")); got != want {
			t.Errorf("arguments for %s = %s, want %s", params, got, want)
		}
	}
}
