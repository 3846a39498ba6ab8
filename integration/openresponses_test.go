package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3/option"

	"github.com/respgate/respgate/integration/orcheck"
)

// openResponsesSpec is the Open Responses OpenAPI document respgate is checked against; see
// testdata/README.md for its source and date.
const openResponsesSpec = "testdata/openresponses-openapi-2026-04-24.json"

var loadSchema = sync.OnceValues(func() (*orcheck.Schema, error) { return orcheck.Load(openResponsesSpec) })

func schema(t testing.TB) *orcheck.Schema {
	t.Helper()
	s, err := loadSchema()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// conformance is an openai-go middleware that checks every response object and every streamed
// event the client receives against the Open Responses schema and streaming rules
// (orcheck.Schema.Wrap); a violation fails the test.
func conformance(t testing.TB) option.Middleware {
	s := schema(t)
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err != nil {
			return res, err
		}
		s.Wrap(res, req.Method+" "+req.URL.Path, func(what string, err error) {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
		return res, nil
	}
}

// The checker itself: it accepts respgate's output (the matrix below) and rejects each kind of
// fault the Open Responses schema and streaming rules forbid, including the raw vLLM dialect
// respgate exists to normalise.
func TestOpenResponsesCheckerRejectsWhatTheSpecificationForbids(t *testing.T) {
	s := schema(t)
	g := newGateway(t, nil)
	r := g.create(t, `{"model":"`+harmony+`","input":"hi"}`)
	good := []byte(r.RawJSON())
	if err := s.Response(good); err != nil {
		t.Fatalf("respgate's response does not conform: %v", err)
	}
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	part := func(m map[string]any) map[string]any {
		for _, it := range m["output"].([]any) {
			if it.(map[string]any)["type"] == "message" {
				return it.(map[string]any)["content"].([]any)[0].(map[string]any)
			}
		}
		t.Fatal("no message in the output")
		return nil
	}
	for name, bad := range map[string][]byte{
		"a required key missing (store)":    mutate(func(m map[string]any) { delete(m, "store") }),
		"null temperature":                  mutate(func(m map[string]any) { m["temperature"] = nil }),
		"top_logprobs not an integer":       mutate(func(m map[string]any) { m["top_logprobs"] = 1.5 }),
		"output_text without logprobs":      mutate(func(m map[string]any) { delete(part(m), "logprobs") }),
		"reasoning without effort":          mutate(func(m map[string]any) { m["reasoning"] = map[string]any{"summary": nil} }),
		"an item without status":            mutate(func(m map[string]any) { delete(m["output"].([]any)[0].(map[string]any), "status") }),
		"null encrypted_content on an item": mutate(func(m map[string]any) { m["output"].([]any)[0].(map[string]any)["encrypted_content"] = nil }),
		"a hosted tool in tools":            mutate(func(m map[string]any) { m["tools"] = []any{map[string]any{"type": "web_search"}} }),
		"function tool without strict": mutate(func(m map[string]any) {
			m["tools"] = []any{map[string]any{"type": "function", "name": "f", "description": nil, "parameters": nil}}
		}),
		"unknown item type in output": mutate(func(m map[string]any) { m["output"] = []any{map[string]any{"type": "acme_thing", "id": "x"}} }),
		"text without format":         mutate(func(m map[string]any) { m["text"] = map[string]any{"verbosity": "low"} }),
	} {
		if err := s.Response(bad); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}

	// vLLM's own dialect (the simulator with its quirks, straight, without respgate) fails on both
	// the response object and the stream; respgate's normalisation is what makes it conform.
	code, body, _ := rawDo(t, "POST", g.SimURL+"/responses", `{"model":"`+harmony+`","input":"hi"}`)
	if code != 200 || s.Response(body) == nil {
		t.Errorf("the raw simulator response (%d) passed the check: %s", code, body)
	}
	code, body, _ = rawDo(t, "POST", g.SimURL+"/responses", `{"model":"`+harmony+`","input":"hi","stream":true}`)
	st := s.NewStream()
	_, _ = st.Write(body)
	if err := st.Close(); code != 200 || err == nil {
		t.Errorf("the raw simulator stream (%d) passed the check", code)
	} else {
		t.Logf("raw vLLM stream: %v", err)
	}
	for name, sse := range map[string]string{
		"event name differs from type": "event: response.created\ndata: {\"type\":\"response.in_progress\"}\n\n",
		"no [DONE]":                    "",
		"vendor event":                 "event: acme:thing\ndata: {\"type\":\"acme:thing\",\"sequence_number\":0}\n\n",
	} {
		st := s.NewStream()
		_, _ = st.Write([]byte(sse))
		if st.Close() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Every kind of turn respgate serves, in both of vLLM's dialects with their quirks on, streamed
// and not: each response object and each event conforms (checked by the harness's middleware on
// every request, and here once more on the raw bytes, including [DONE] and the SSE framing, and on
// the GET replay of a stored stream).
func TestEveryResponseAndEventConformsToOpenResponses(t *testing.T) {
	s := schema(t)
	g := newGateway(t, nil)
	cases := map[string]string{
		"text":                `"input":"hello there"`,
		"tool call":           `"input":"call get_weather for Paris","tools":` + tools,
		"parallel tool calls": `"input":"use tools","tools":` + tools,
		"instructions, metadata, sampling": `"input":"hi","instructions":"be brief","metadata":{"k":"v"},"temperature":0.3,"top_p":0.5,` +
			`"max_output_tokens":500,"reasoning":{"effort":"low"},"text":{"verbosity":"low"},"tool_choice":"none","tools":` + tools,
		"incomplete (max_output_tokens)": `"input":"tell me a long story","max_output_tokens":3`,
		"structured output":              `"input":"hi","text":{"format":{"type":"json_schema","name":"answer","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
		"failed mid-stream":              `"input":"hi","model":"%s?cut_after=6"`,
		"codex-shaped request": `"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"sys"}]},` +
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"call agents__spawn now"}]}],` +
			`"store":false,"include":["reasoning.encrypted_content"],"reasoning":{"summary":"auto"},"client_metadata":{"x":"y"},` +
			`"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}},` +
			`{"type":"namespace","name":"agents","description":"d","tools":[{"type":"function","name":"spawn","parameters":{"type":"object"}}]},` +
			`{"type":"web_search","external_web_access":false},{"type":"custom","name":"apply_patch"}]`,
	}
	for _, model := range []string{harmony, parser} {
		for name, members := range cases {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/stream=%v", model, name, stream), func(t *testing.T) {
					body := members
					if strings.Contains(body, `"model":"%s`) {
						body = fmt.Sprintf(body, model)
					} else {
						body = fmt.Sprintf(`"model":%q,`, model) + body
					}
					body = fmt.Sprintf(`{%s,"stream":%v}`, body, stream)
					code, raw, hdr := rawDo(t, "POST", g.URL+"/responses", body, "Authorization", "Bearer test-key")
					if strings.Contains(name, "failed") && !stream {
						if code != 502 {
							t.Fatalf("an upstream cut before the answer: status %d, want 502: %s", code, raw)
						}
						return
					}
					if code != 200 {
						t.Fatalf("status %d: %s", code, raw)
					}
					var id string
					if stream {
						st := s.NewStream()
						_, _ = st.Write(raw)
						if err := st.Close(); err != nil {
							t.Fatalf("stream:\n%v\n%s", err, raw)
						}
						id = streamResponseID(t, raw)
					} else {
						if err := s.Response(raw); err != nil {
							t.Fatalf("%v\n%s", err, raw)
						}
						var r struct{ ID string }
						_ = json.Unmarshal(raw, &r)
						id = r.ID
					}
					if strings.Contains(name, "codex") {
						// Unservable tools dropped and named; the namespaced tool's call comes back
						// in the client's terms, never under the flat name vLLM was given.
						if hdr.Get("X-Respgate-Dropped-Tools") != "web_search,custom" {
							t.Errorf("X-Respgate-Dropped-Tools = %q", hdr.Get("X-Respgate-Dropped-Tools"))
						}
						if !strings.Contains(string(raw), `"name":"spawn","namespace":"agents"`) || strings.Contains(string(raw), `"agents__spawn"`) {
							t.Errorf("the namespaced call is not mapped back:\n%s", raw)
						}
					}
					if strings.Contains(body, `"store":false`) {
						return
					}
					// The stored response, read back and replayed as a stream, conforms too.
					code, raw, _ = rawDo(t, "GET", g.URL+"/responses/"+id, "", "Authorization", "Bearer test-key")
					if err := s.Response(raw); code != 200 || err != nil {
						t.Fatalf("GET %d: %v\n%s", code, err, raw)
					}
					code, raw, _ = rawDo(t, "GET", g.URL+"/responses/"+id+"?stream=true", "", "Authorization", "Bearer test-key")
					st := s.NewStream()
					_, _ = st.Write(raw)
					if err := st.Close(); code != 200 || err != nil {
						t.Fatalf("GET ?stream=true %d:\n%v\n%s", code, err, raw)
					}
				})
			}
		}
	}
	// The same turns through openai-go (checked by the middleware) for good measure.
	g.create(t, `{"model":"`+harmony+`","input":"call lookup please","tools":`+tools+`}`)
	g.stream(t, `{"model":"`+parser+`","input":"call lookup please","tools":`+tools+`,"stream":true}`)
}

func streamResponseID(t *testing.T, raw []byte) string {
	t.Helper()
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(rest, `"response.created"`) {
			var ev struct{ Response struct{ ID string } }
			if err := json.Unmarshal([]byte(rest), &ev); err == nil {
				return ev.Response.ID
			}
		}
	}
	t.Fatal("no response.created in the stream")
	return ""
}
