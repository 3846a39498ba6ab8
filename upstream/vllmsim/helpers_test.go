package vllmsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixedNow is the clock of every test Sim, so that created_at is stable.
func fixedNow() time.Time { return time.Unix(1767225600, 0) }

// newServer serves a Sim over HTTP (connection cuts need a real server).
func newServer(t *testing.T, opts Options) (*httptest.Server, *Sim) {
	t.Helper()
	if opts.Now == nil {
		opts.Now = fixedNow
	}
	sim := New(opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return srv, sim
}

// reply is what a client received: status, headers, the raw body (up to a cut) and the read error.
type reply struct {
	status  int
	header  http.Header
	raw     []byte
	readErr error
}

// post sends body to /v1/responses and reads the whole answer, tolerating a cut connection.
func post(t *testing.T, srv *httptest.Server, body string, header ...string) reply {
	t.Helper()
	r, err := send(t.Context(), srv, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is post for any goroutine: it returns the transport error instead of failing the test.
func send(ctx context.Context, srv *httptest.Server, body string, header ...string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/responses", strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("POST /v1/responses: %w", err)
	}
	defer resp.Body.Close()
	raw, readErr := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, raw: raw, readErr: readErr}, nil
}

// sseEvent is one parsed frame.
type sseEvent struct {
	typ  string
	data string
	obj  map[string]any // nil when data is not a JSON object
}

// events parses the SSE frames of r strictly in vLLM's framing ("event: T\ndata: D\n\n"); a trailing
// partial frame is returned separately.
func (r reply) events(t *testing.T) (evs []sseEvent, partial string) {
	t.Helper()
	frames := strings.Split(string(r.raw), "\n\n")
	partial = frames[len(frames)-1]
	for _, f := range frames[:len(frames)-1] {
		typ, data, ok := strings.Cut(f, "\ndata: ")
		if !ok || !strings.HasPrefix(typ, "event: ") || strings.Contains(data, "\n") {
			t.Fatalf("bad frame %q", f)
		}
		ev := sseEvent{typ: strings.TrimPrefix(typ, "event: "), data: data}
		var obj map[string]any
		if json.Unmarshal([]byte(data), &obj) == nil {
			ev.obj = obj
		}
		evs = append(evs, ev)
	}
	return evs, partial
}

// stream posts a streaming request that must complete and returns its events.
func stream(t *testing.T, srv *httptest.Server, body string, header ...string) []sseEvent {
	t.Helper()
	r := post(t, srv, body, header...)
	if r.status != http.StatusOK || r.readErr != nil {
		t.Fatalf("status %d, read error %v, body %.300s", r.status, r.readErr, r.raw)
	}
	evs, partial := r.events(t)
	if partial != "" {
		t.Fatalf("trailing partial frame %q", partial)
	}
	for _, ev := range evs {
		if ev.obj == nil {
			t.Fatalf("event %s: data is not a JSON object: %.200s", ev.typ, ev.data)
		}
	}
	return evs
}

// decode parses a JSON object body.
func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("decode %.300s: %v", raw, err)
	}
	return obj
}

func ofType(evs []sseEvent, typ string) []sseEvent {
	var out []sseEvent
	for _, ev := range evs {
		if ev.typ == typ {
			out = append(out, ev)
		}
	}
	return out
}

func types(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.typ
	}
	return out
}

// final returns the response of the last (terminal) event.
func final(t *testing.T, evs []sseEvent) map[string]any {
	t.Helper()
	last := evs[len(evs)-1]
	resp, ok := last.obj["response"].(map[string]any)
	if !ok {
		t.Fatalf("last event %s has no response", last.typ)
	}
	return resp
}

// get walks obj by keys and indices ("output", 0, "content", 0, "text").
func get(obj any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := obj.(map[string]any)
			if !ok {
				return nil
			}
			obj = m[k]
		case int:
			a, ok := obj.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			obj = a[k]
		}
	}
	return obj
}

func has(obj map[string]any, key string) bool {
	_, ok := obj[key]
	return ok
}

// outputTexts returns the texts of the final output: reasoning text, message text, or
// "name(arguments)" for a function call, in order.
func outputTexts(resp map[string]any) []string {
	var out []string
	items, _ := resp["output"].([]any)
	for _, it := range items {
		switch get(it, "type") {
		case "reasoning":
			out = append(out, "reasoning:"+str(get(it, "content", 0, "text")))
		case "message":
			out = append(out, "message:"+str(get(it, "content", 0, "text")))
		case "function_call":
			out = append(out, "call:"+str(get(it, "name"))+str(get(it, "arguments")))
		}
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// body builds a request body from a model and JSON members ("input": …).
func body(model string, stream bool, members ...string) string {
	var b bytes.Buffer
	b.WriteString(`{"model":`)
	m, _ := json.Marshal(model)
	b.Write(m)
	if stream {
		b.WriteString(`,"stream":true`)
	}
	for _, mem := range members {
		b.WriteString(",")
		b.WriteString(mem)
	}
	b.WriteString("}")
	return b.String()
}

// waitOrTimeout fails the test if done is not closed within d.
func waitOrTimeout(t *testing.T, done <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %s", what, d)
	}
}
