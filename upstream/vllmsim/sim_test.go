package vllmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestStreamAndJSONCarryTheSameContent: the non-streaming answer is the stream's final response
// (same texts, statuses and usage; only ids differ, as in vLLM).
func TestStreamAndJSONCarryTheSameContent(t *testing.T) {
	srv, _ := newServer(t, Options{})
	requests := [][]string{
		{chatHistory},
		{toolsInput},
		{chatHistory, `"max_output_tokens":20`},
		{traceTools, `"input":"call get_weather"`},
	}
	for _, model := range []string{HarmonyModel, ParserModel, HarmonyModel + "?quirks=none", ParserModel + "?quirks=none"} {
		for i, members := range requests {
			t.Run(fmt.Sprintf("%s/%d", model, i), func(t *testing.T) {
				streamed := final(t, stream(t, srv, body(model, true, members...)))
				r := post(t, srv, body(model, false, members...))
				if r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.raw)
				}
				plain := decode(t, r.raw)
				if a, b := outputTexts(streamed), outputTexts(plain); !slices.Equal(a, b) || len(a) == 0 {
					t.Errorf("stream output %q\n json output %q", a, b)
				}
				for _, k := range []string{"status", "incomplete_details", "usage", "model", "max_output_tokens"} {
					if a, b := jsonOf(streamed[k]), jsonOf(plain[k]); a != b {
						t.Errorf("%s: stream %s, json %s", k, a, b)
					}
				}
				for j := range plain["output"].([]any) {
					if a, b := get(streamed, "output", j, "status"), get(plain, "output", j, "status"); a != b {
						t.Errorf("item %d status: stream %v, json %v", j, a, b)
					}
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
			})
		}
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestStreamFraming(t *testing.T) {
	srv, _ := newServer(t, Options{})
	r := post(t, srv, body(HarmonyModel, true, chatHistory))
	if ct := r.header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if bytes.Contains(r.raw, []byte("[DONE]")) {
		t.Errorf("vLLM sends no [DONE]")
	}
	evs := stream(t, srv, body(HarmonyModel, true, chatHistory))
	if evs[0].typ != "response.created" || evs[1].typ != "response.in_progress" {
		t.Errorf("first events %v", types(evs[:2]))
	}
	for i, ev := range evs {
		if ev.obj["type"] != ev.typ || num(ev.obj["sequence_number"]) != i {
			t.Errorf("event %d: type %v sequence_number %v", i, ev.obj["type"], ev.obj["sequence_number"])
		}
		if has(ev.obj, "error") {
			t.Errorf("event %d has a top-level error key", i)
		}
		if strings.HasSuffix(ev.typ, "output_text.delta") {
			if lp, ok := ev.obj["logprobs"].([]any); !ok || len(lp) != 0 {
				t.Errorf("delta logprobs %v, want []", ev.obj["logprobs"])
			}
		}
		if ev.typ == "response.failed" || strings.Contains(ev.typ, "summary") {
			t.Errorf("vLLM never sends %s", ev.typ)
		}
	}
	created := evs[0].obj["response"].(map[string]any)
	if created["status"] != "in_progress" || created["usage"] != nil || len(created["output"].([]any)) != 0 {
		t.Errorf("response.created %v", created)
	}
	if created["id"] != final(t, evs)["id"] || !strings.HasPrefix(str(created["id"]), "resp_") {
		t.Errorf("response ids %v / %v", created["id"], final(t, evs)["id"])
	}
}

func TestRequestIDBecomesTheResponseID(t *testing.T) {
	srv, _ := newServer(t, Options{})
	resp := decode(t, post(t, srv, body(ParserModel, false, `"input":"hi","request_id":"resp_mine"`)).raw)
	if resp["id"] != "resp_mine" {
		t.Errorf("id %v", resp["id"])
	}
}

func TestSeedMakesIDsDeterministic(t *testing.T) {
	run := func(seed uint64) (ids []string) {
		srv, _ := newServer(t, Options{Seed: seed})
		for range 2 {
			resp := decode(t, post(t, srv, body(HarmonyModel, false, `"input":"hi"`)).raw)
			ids = append(ids, str(resp["id"]), str(get(resp, "output", 0, "id")))
		}
		return ids
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) || slices.Equal(a, c) || a[0] == a[2] {
		t.Errorf("seed 7: %v / %v; seed 8: %v", a, b, c)
	}
	if x, y := run(0), run(0); slices.Equal(x, y) {
		t.Errorf("without a seed ids repeat: %v", x)
	}
}

func TestRecording(t *testing.T) {
	srv, sim := newServer(t, Options{})
	bodies := []string{
		body(HarmonyModel, false, `"input":"first"`),
		body(ParserModel+"?status=500", true, `"input":"second"`),
		"{not json",
	}
	for i, b := range bodies {
		post(t, srv, b, "X-Test", fmt.Sprint(i))
	}
	resp, err := srv.Client().Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	got := sim.Requests()
	if len(got) != 4 {
		t.Fatalf("%d requests recorded, want 4", len(got))
	}
	for i, b := range bodies {
		if got[i].Method != "POST" || got[i].Path != "/v1/responses" || string(got[i].Body) != b || got[i].Header.Get("X-Test") != fmt.Sprint(i) {
			t.Errorf("request %d: %s %s %q %v", i, got[i].Method, got[i].Path, got[i].Body, got[i].Header)
		}
	}
	if got[3].Method != "GET" || got[3].Path != "/v1/models" || len(got[3].Body) != 0 {
		t.Errorf("request 3: %s %s", got[3].Method, got[3].Path)
	}

	// The log over HTTP, which is not itself recorded.
	resp, err = srv.Client().Get(srv.URL + "/sim/requests")
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		Method string              `json:"method"`
		Path   string              `json:"path"`
		Header map[string][]string `json:"header"`
		Body   string              `json:"body"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&entries); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(entries) != 4 || entries[1].Body != bodies[1] || entries[1].Header["X-Test"][0] != "1" || len(sim.Requests()) != 4 {
		t.Errorf("GET /sim/requests: %+v", entries)
	}

	sim.Reset()
	if n := len(sim.Requests()); n != 0 {
		t.Errorf("%d requests after Reset", n)
	}
	post(t, srv, bodies[0])
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, srv.URL+"/sim/requests", nil)
	resp, err = srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || len(sim.Requests()) != 0 {
		t.Errorf("DELETE /sim/requests: %d, %d left", resp.StatusCode, len(sim.Requests()))
	}
}

func TestRecordLimit(t *testing.T) {
	srv, sim := newServer(t, Options{RecordLimit: 3})
	for i := range 5 {
		post(t, srv, body(HarmonyModel, false, fmt.Sprintf(`"input":"%d"`, i)))
	}
	var got []string
	for _, r := range sim.Requests() {
		got = append(got, string(r.Body))
	}
	want := []string{body(HarmonyModel, false, `"input":"2"`), body(HarmonyModel, false, `"input":"3"`), body(HarmonyModel, false, `"input":"4"`)}
	if !slices.Equal(got, want) {
		t.Errorf("kept %q", got)
	}
	srv, sim = newServer(t, Options{RecordLimit: -1})
	post(t, srv, body(HarmonyModel, false, `"input":"x"`))
	if len(sim.Requests()) != 0 {
		t.Errorf("recorded with RecordLimit -1")
	}
}

func TestRoutes(t *testing.T) {
	srv, _ := newServer(t, Options{})
	do := func(method, path string) reply {
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(""))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	}
	vllmErr(t, do("GET", "/v1/chat/nothing"), 404, "Not Found", nil, "Not Found")
	vllmErr(t, do("GET", "/v1/responses"), 405, "Method Not Allowed", nil, "Method Not Allowed")
	vllmErr(t, do("POST", "/v1/models"), 405, "Method Not Allowed", nil, "Method Not Allowed")
	vllmErr(t, do("GET", "/v1/responses/resp_abc"), 404, "invalid_request_error", "response_id", "Response with id 'resp_abc' not found.")
	vllmErr(t, do("POST", "/v1/responses/resp_abc/cancel"), 404, "invalid_request_error", "response_id", "Response with id 'resp_abc' not found.")
	vllmErr(t, do("DELETE", "/v1/responses/resp_abc"), 404, "Not Found", nil, "Not Found")

	models := decode(t, do("GET", "/v1/models").raw)
	data := models["data"].([]any)
	if models["object"] != "list" || len(data) != 2 || get(data, 0, "id") != HarmonyModel || get(data, 1, "id") != ParserModel ||
		get(data, 0, "object") != "model" || get(data, 0, "owned_by") != "vllm" || num(get(data, 0, "max_model_len")) != 131072 ||
		get(data, 0, "permission", 0, "object") != "model_permission" {
		t.Errorf("/v1/models: %v", models)
	}
}

func TestCustomModels(t *testing.T) {
	srv, _ := newServer(t, Options{Models: []Model{{"openai/gpt-oss-120b", Harmony}}})
	evs := stream(t, srv, body("openai/gpt-oss-120b", true, chatHistory))
	if len(ofType(evs, "response.reasoning_part.added")) != 1 || final(t, evs)["model"] != "openai/gpt-oss-120b" {
		t.Errorf("custom harmony model: %v", types(evs))
	}
	if r := post(t, srv, body(HarmonyModel, false, `"input":"hi"`)); r.status != 404 {
		t.Errorf("a model not served: status %d", r.status)
	}
}

// TestConcurrentStreams runs many streams and log reads at once (run with -race).
func TestConcurrentStreams(t *testing.T) {
	srv, sim := newServer(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			model := []string{HarmonyModel, ParserModel}[i%2] + "?delay_ms=1"
			r, err := send(t.Context(), srv, body(model, true, fmt.Sprintf(`"input":"remember: n=%d"`, i)))
			if err != nil || !bytes.Contains(r.raw, fmt.Appendf(nil, "Facts: n=%d.", i)) || r.readErr != nil {
				errs <- fmt.Sprintf("stream %d: %v %v %.200s", i, err, r.readErr, r.raw)
			}
			_ = sim.Requests()
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := len(sim.Requests()); n != 48 {
		t.Errorf("%d requests recorded, want 48", n)
	}
}

func TestDialectString(t *testing.T) {
	if Harmony.String() != "harmony" || ReasoningParser.String() != "reasoning-parser" || Dialect(9).String() != "Dialect(9)" {
		t.Error("Dialect.String")
	}
}

func TestNewPanicsOnAnInvalidFault(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid Options.Fault")
		}
	}()
	New(Options{Fault: "nope=1"})
}
