package rehydrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/respgate/respgate/wire"
)

// bodyMembers is every top-level member Build may write.
var bodyMembers = []string{"model", "instructions", "stream", "store", "tools", "tool_choice",
	"reasoning", "include", "input", "parallel_tool_calls", "max_output_tokens", "max_tool_calls", "text",
	"truncation", "temperature", "top_p", "top_logprobs", "metadata", "user", "service_tier", "top_k",
	"repetition_penalty", "seed", "stop", "ignore_eos", "logit_bias", "structured_outputs",
	"skip_special_tokens", "include_stop_str_in_output"}

// FuzzBuild: for any history, input and request, Build either answers a 400 APIError or returns a
// valid JSON body that carries no encrypted_content and only allowlisted members.
func FuzzBuild(f *testing.F) {
	chain, err := os.ReadFile(filepath.Join("testdata", "chain5.json"))
	if err != nil {
		f.Fatal(err)
	}
	var c struct {
		History json.RawMessage            `json:"history"`
		Request map[string]json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(chain, &c); err != nil {
		f.Fatal(err)
	}
	req, _ := json.Marshal(c.Request)
	f.Add(string(c.History), string(c.Request["input"]), string(req))
	captures, _ := filepath.Glob(filepath.Join("testdata", "captures", "*.json"))
	for _, p := range captures {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if len(raw) > 4<<10 {
			continue // the Codex captures: large seeds make the fuzzer spend its time minimising
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			f.Fatal(err)
		}
		f.Add(`[]`, string(m["input"]), string(raw))
	}
	f.Add(`[{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}],"encrypted_content":"E"}]`,
		`[{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"E"},{"type":"item_reference","id":"rs_1"},{"role":"user","content":"q"}]`,
		`{"model":"m","include":["reasoning.encrypted_content"]}`)
	f.Add(`[{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}]`,
		`[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"u"}]}]`,
		`{"model":"m","tools":[{"type":"function","name":"f"},{"type":"web_search"}],"tool_choice":{"type":"mcp"}}`)
	f.Add(`[]`, `"hi"`, `{"model":"m","instructions":"x","stream":true}`)

	f.Fuzz(func(t *testing.T, history, input, request string) {
		var hraw []json.RawMessage
		if json.Unmarshal([]byte(history), &hraw) != nil {
			return
		}
		var hist []wire.Item
		lookup := MapLookup{}
		for _, r := range hraw {
			it, err := wire.ParseItem(r)
			if err != nil {
				continue
			}
			hist = append(hist, it)
			if it.ID != "" {
				lookup[it.ID] = it
			}
		}
		var reqm map[string]json.RawMessage
		_ = json.Unmarshal([]byte(request), &reqm)
		var req *wire.CreateRequest
		if reqm != nil {
			var err error
			if req, err = wire.DecodeCreateRequest(reqm); err != nil {
				mustBe400(t, err) // the server answers it before Build
				return
			}
		}

		in, err := ParseInput(json.RawMessage(input))
		if err != nil {
			mustBe400(t, err)
			return
		}
		samePrepared(t, &Params{History: hist, Input: in, Request: req, Lookup: lookup})
		res, err := Build(&Params{History: hist, Input: in, Request: req, Lookup: lookup, NewID: seqIDs()})
		if err != nil {
			mustBe400(t, err)
			return
		}
		if !json.Valid(res.Body) || !utf8.Valid(res.Body) {
			t.Fatalf("invalid body %q", res.Body)
		}
		var body map[string]any
		if err := json.Unmarshal(res.Body, &body); err != nil {
			t.Fatal(err)
		}
		for k := range body {
			if !slices.Contains(bodyMembers, k) {
				t.Fatalf("member %q in body", k)
			}
		}
		if body["store"] != false {
			t.Fatalf("store = %v", body["store"])
		}
		walkKeys(body["input"], func(k string) {
			if k == "encrypted_content" || k == "status" {
				t.Fatalf("%s upstream: %s", k, res.Body)
			}
		})
		if inc, ok := body["include"].([]any); ok && slices.Contains(inc, any("reasoning.encrypted_content")) {
			t.Fatal("include asks for encrypted_content")
		}
		if n := len(body["input"].([]any)); n != res.Stats.Items {
			t.Fatalf("Stats.Items %d, body has %d", res.Stats.Items, n)
		}
		for _, it := range res.Input {
			if it.ID == "" || !json.Valid(it.JSON) {
				t.Fatalf("stored item without id or invalid: %s", it.JSON)
			}
		}
	})
}

func mustBe400(t *testing.T, err error) {
	t.Helper()
	var ae *wire.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code == "" || ae.Message == "" {
		t.Fatalf("error %v (%T) is not a 400 APIError with a code", err, err)
	}
	if !utf8.ValidString(ae.Message) {
		t.Fatalf("message is not UTF-8: %q", ae.Message)
	}
}

func fixedID(prefix string) string { return prefix + "_fixed" }

// samePrepared checks that a Build that starts from a prepared prefix of the history (Params.
// Prepared) answers exactly what the Build of the whole history answers: the same body, stored
// input, stats and errors, and that the projection it returns is the whole history's.
func samePrepared(t testing.TB, p *Params) {
	t.Helper()
	full := *p
	full.NewID = fixedID // a generator of p's would mint other ids in each Build
	want, werr := Build(&full)
	splits := []int{0, len(full.History) / 2, len(full.History)}
	if len(full.History) <= 64 {
		splits = splits[:0]
		for k := range len(full.History) + 1 {
			splits = append(splits, k)
		}
	}
	histParam := full.HistoryParam
	if histParam == "" {
		histParam = defaultHistoryParam
	}
	for _, k := range splits {
		pre, err := prepare(&Params{History: full.History[:k], Keys: full.Keys, Tenant: full.Tenant}, histParam, fixedID)
		if err != nil {
			if werr == nil {
				t.Fatalf("the first %d history items fail (%v), the whole history does not", k, err)
			}
			continue
		}
		withPre := full
		withPre.Prepared = pre
		before := pre.clone()
		got, gerr := Build(&withPre)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("prepared at %d: error %v, want %v", k, gerr, werr)
		}
		if !reflect.DeepEqual(pre, before) {
			t.Fatalf("prepared at %d: Build changed the History it was given", k)
		}
		if werr != nil {
			continue
		}
		if !bytes.Equal(got.Body, want.Body) {
			t.Fatalf("prepared at %d: body\n%s\nwant\n%s", k, got.Body, want.Body)
		}
		if !reflect.DeepEqual(got.Input, want.Input) || got.Stats != want.Stats ||
			!reflect.DeepEqual(got.DroppedTools, want.DroppedTools) || !reflect.DeepEqual(got.ToolNames, want.ToolNames) {
			t.Fatalf("prepared at %d: result %+v, want %+v", k, got, want)
		}
		if got.History.Len() != len(full.History) || !reflect.DeepEqual(got.History, want.History) {
			t.Fatalf("prepared at %d: History covers %d items, want the %d of the whole history", k, got.History.Len(), len(full.History))
		}
	}
	if werr == nil {
		sameInBuf(t, &full, want)
	}
}

// sameInBuf checks that Build gives want when handed a buffer (Params.Buf) that holds an
// earlier body: written into the buffer when it is large enough, into a new one when not.
func sameInBuf(t testing.TB, p *Params, want *Result) {
	t.Helper()
	for _, size := range []int{1, 4*len(want.Body) + 4096} {
		q := *p
		q.Buf = bytes.Repeat([]byte{'#'}, size)
		got, err := Build(&q)
		if err != nil {
			t.Fatalf("built into a buffer of %d bytes: %v", size, err)
		}
		if !bytes.Equal(got.Body, want.Body) || !reflect.DeepEqual(got.Input, want.Input) || got.Stats != want.Stats {
			t.Fatalf("built into a buffer of %d bytes: body\n%s\nwant\n%s", size, got.Body, want.Body)
		}
		if inBuf := &got.Body[0] == &q.Buf[0]; inBuf != (size > 1) {
			t.Fatalf("built into a buffer of %d bytes: body in it %v, want %v", size, inBuf, size > 1)
		}
	}
}
