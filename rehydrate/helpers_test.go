package rehydrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/respgate/respgate/wire"
)

// mustItem parses one item or fails the test.
func mustItem(t testing.TB, s string) wire.Item {
	t.Helper()
	it, err := wire.ParseItem([]byte(s))
	if err != nil {
		t.Fatalf("ParseItem(%s): %v", s, err)
	}
	return it
}

func mustItems(t testing.TB, ss ...string) []wire.Item {
	t.Helper()
	out := make([]wire.Item, len(ss))
	for i, s := range ss {
		out[i] = mustItem(t, s)
	}
	return out
}

// mustInput runs ParseInput on a JSON text.
func mustInput(t testing.TB, s string) []wire.Item {
	t.Helper()
	in, err := ParseInput(json.RawMessage(s))
	if err != nil {
		t.Fatalf("ParseInput(%s): %v", s, err)
	}
	return in
}

// mustRequest decodes a request body as the server does (wire.DecodeCreateRequest).
func mustRequest(t testing.TB, s string) *wire.CreateRequest {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("request %s: %v", s, err)
	}
	return mustDecode(t, m)
}

// mustDecode decodes request members as the server does.
func mustDecode(t testing.TB, m map[string]json.RawMessage) *wire.CreateRequest {
	t.Helper()
	r, err := wire.DecodeCreateRequest(m)
	if err != nil {
		t.Fatalf("request %v: %v", m, err)
	}
	return r
}

// seqIDs mints predictable ids: prefix + "gen1", "gen2", …
func seqIDs() func(string) string {
	n := 0
	return func(prefix string) string {
		n++
		return fmt.Sprintf("%sgen%d", prefix, n)
	}
}

func mustBuild(t testing.TB, p *Params) *Result {
	t.Helper()
	if p.NewID == nil {
		p.NewID = seqIDs()
	}
	if p.Request == nil {
		p.Request = mustRequest(t, `{"model":"m"}`)
	}
	samePrepared(t, p)
	res, err := Build(p)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if !json.Valid(res.Body) {
		t.Fatalf("Build returned invalid JSON: %s", res.Body)
	}
	return res
}

// buildErr runs Build and returns its *wire.APIError, failing if there is none.
func buildErr(t testing.TB, p *Params) *wire.APIError {
	t.Helper()
	if p.NewID == nil {
		p.NewID = seqIDs()
	}
	if p.Request == nil {
		p.Request = mustRequest(t, `{"model":"m"}`)
	}
	samePrepared(t, p)
	res, err := Build(p)
	if err == nil {
		t.Fatalf("Build succeeded, want an error; body %s", res.Body)
	}
	var ae *wire.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("Build error %v (%T) is not a *wire.APIError", err, err)
	}
	if ae.Status != 400 || ae.Type != wire.ErrInvalidRequest {
		t.Fatalf("error %v: want 400 invalid_request_error", ae)
	}
	return ae
}

// upstreamInput returns the "input" array of a body, one compact JSON text per item.
func upstreamInput(t testing.TB, body []byte) []string {
	t.Helper()
	var b struct {
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("body: %v", err)
	}
	out := make([]string, len(b.Input))
	for i, raw := range b.Input {
		out[i] = compact(t, raw)
	}
	return out
}

func compact(t testing.TB, raw []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return buf.String()
}

// members returns the top-level members of a JSON object.
func members(t testing.TB, raw []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("object %s: %v", raw, err)
	}
	return m
}

// walkKeys calls fn for every object key at any depth of a decoded JSON value.
func walkKeys(v any, fn func(key string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			fn(k)
			walkKeys(e, fn)
		}
	case []any:
		for _, e := range x {
			walkKeys(e, fn)
		}
	}
}

func checkErr(t testing.TB, got *wire.APIError, code, param, message string) {
	t.Helper()
	if got.Code != code || got.Param != param {
		t.Errorf("error code=%q param=%q, want code=%q param=%q (message %q)", got.Code, got.Param, code, param, got.Message)
	}
	if message != "" && got.Message != message {
		t.Errorf("message:\n got %s\nwant %s", got.Message, message)
	}
}

// clone is a deep copy of h, to check that Build leaves the History it was given unchanged.
func (h *History) clone() *History {
	c := *h
	c.buf = slices.Clone(h.buf)
	c.ids = maps.Clone(h.ids)
	c.calls = maps.Clone(h.calls)
	c.sentReasoning = slices.Clone(h.sentReasoning)
	c.drop = slices.Clone(h.drop)
	return &c
}
