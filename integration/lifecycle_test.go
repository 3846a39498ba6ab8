package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
)

// stripIDs returns items' JSON with their id and call_id members removed, to compare two turns'
// content (each turn mints its own ids).
func stripIDs(t *testing.T, items []responses.ResponseOutputItemUnion) string {
	t.Helper()
	var out []map[string]any
	for _, it := range items {
		var m map[string]any
		if err := json.Unmarshal([]byte(it.RawJSON()), &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "id")
		delete(m, "call_id")
		out = append(out, m)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func TestStreamedAndNonStreamedTurnsStoreIdenticalItems(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		for _, model := range []string{harmony, parser} {
			for _, input := range []string{`"hello there. remember: blue"`, `"call get_weather for Paris"`} {
				body := fmt.Sprintf(`{"model":%q,"input":%s,"tools":%s`, model, input, tools)
				s := g.stream(t, body+`,"stream":true}`)
				n := g.create(t, body+`}`)
				if a, b := stripIDs(t, s.final.Output), stripIDs(t, n.Output); a != b {
					t.Fatalf("%s %s: streamed and non-streamed outputs differ:\n%s\n%s", model, input, a, b)
				}
				// The client's final response equals what GET returns, ids included.
				for _, r := range []*responses.Response{s.final, n} {
					got, err := g.client.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
					if err != nil {
						t.Fatal(err)
					}
					if !jsonEqual(outputJSON(r), outputJSON(got)) {
						t.Fatalf("GET output differs from what the client received:\n%s\n%s", outputJSON(r), outputJSON(got))
					}
					if got.Status != r.Status || got.ID != r.ID {
						t.Fatalf("GET status/id %s/%s, want %s/%s", got.Status, got.ID, r.Status, r.ID)
					}
				}
				// Stream ids are the stored ids: every announced item id is in the stored output.
				stored := map[string]bool{}
				for _, it := range s.final.Output {
					stored[it.ID] = true
				}
				for _, ev := range s.events {
					if ev.Type == "response.output_item.added" && !stored[ev.Item.ID] {
						t.Fatalf("streamed item id %s is not stored", ev.Item.ID)
					}
				}
			}
		}
	})
}

func outputJSON(r *responses.Response) string {
	var parts []string
	for _, it := range r.Output {
		parts = append(parts, it.RawJSON())
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestRawStreamEndsWithOneTerminalEventAndDone(t *testing.T) {
	g := newGateway(t, nil)
	status, body, hdr := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"hi","stream":true}`)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", status, hdr.Get("Content-Type"))
	}
	text := string(body)
	if !strings.HasSuffix(text, "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with [DONE]: %q", text[max(0, len(text)-80):])
	}
	if n := strings.Count(text, "event: response.completed\n"); n != 1 {
		t.Fatalf("%d response.completed events", n)
	}
	for _, bad := range []string{"reasoning_part", `"status":null`, `"encrypted_content":null`, `"content":null`} {
		if strings.Contains(text, bad) {
			t.Fatalf("normalised stream still contains %s", bad)
		}
	}
}

func TestQuirkyAndCleanHarmonyStreamsBothPassTheShapeChecks(t *testing.T) {
	g := newGateway(t, nil)
	for _, q := range []string{"", "?quirks=none"} {
		for _, input := range []string{`"hello"`, `"use tools"`} {
			s := g.stream(t, fmt.Sprintf(`{"model":"%s%s","input":%s,"tools":%s,"stream":true}`, harmony, q, input, tools))
			if s.final.Status != "completed" || len(s.final.Output) < 2 {
				t.Fatalf("quirks %q: status %s with %d items", q, s.final.Status, len(s.final.Output))
			}
		}
	}
}

func TestStoreFalseWritesNothingAndCannotBeContinued(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		g := newGateway(t, st)
		r := g.create(t, `{"model":"`+harmony+`","input":"hi","store":false}`)
		s := g.stream(t, `{"model":"`+harmony+`","input":"hi","store":false,"stream":true}`)
		for _, id := range []string{r.ID, s.final.ID} {
			_, _, err := g.Store.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: g.Server.TenantOf("test-key"), ID: id})
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("store:false response %s was stored", id)
			}
			status, body, _ := rawDo(t, "GET", g.URL+"/responses/"+id, "", "Authorization", "Bearer test-key")
			if status != 404 {
				t.Fatalf("GET store:false response: %d %s", status, body)
			}
			status, body, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"again","previous_response_id":"`+id+`"}`,
				"Authorization", "Bearer test-key")
			if _, code, param, _ := envelope(t, body); status != 400 || code != "previous_response_not_found" || param != "previous_response_id" {
				t.Fatalf("continue store:false: %d %s", status, body)
			}
		}
	})
}

func TestUpstreamFailuresBecomeEnvelopesOrResponseFailed(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{Upstream: upstream.Config{IdleTimeout: 500 * time.Millisecond}})
		// An HTTP error before streaming: OpenAI's envelope (docs/errors.md). An unavailable vLLM
		// keeps its status; a 400 keeps vLLM's message with a null code, never vLLM's number.
		status, body, _ := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`?status=503","input":"hi","stream":true}`)
		if typ, code, _, _ := envelope(t, body); status != 503 || typ != "server_error" || code != "upstream_unavailable" {
			t.Fatalf("upstream 503: %d %s", status, body)
		}
		status, body, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`?status=400","input":"hi"}`)
		if _, code, _, msg := envelope(t, body); status != 400 || code != "" || msg != "Simulated error (status 400)." {
			t.Fatalf("upstream 400: %d %s (want a null code and vLLM's message)", status, body)
		}
		// A cut stream and a stalled stream: response.failed with the partial output and the
		// code the same failure gets before the stream (docs/errors.md), stored failed.
		for fault, code := range map[string]string{"cut_after=8": "upstream_error", "stall=5&stall_after=8": "upstream_timeout"} {
			s := g.stream(t, `{"model":"`+harmony+`?`+fault+`","input":"hello world, a longer answer please","stream":true}`)
			if s.final.Status != "failed" || string(s.final.Error.Code) != code {
				t.Fatalf("%s: final status %s error %+v", fault, s.final.Status, s.final.Error)
			}
			got, err := g.client.Responses.Get(t.Context(), s.final.ID, responses.ResponseGetParams{})
			if err != nil || got.Status != "failed" || len(got.Output) == 0 {
				t.Fatalf("%s: stored %v %v with %d items", fault, err, got.Status, len(got.Output))
			}
		}
	})
}

func TestRefusedUpstreamIs502(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{UpstreamURL: "http://127.0.0.1:1/v1"})
	status, body, _ := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"hi","stream":true}`)
	if typ, _, _, _ := envelope(t, body); status != 502 || typ != "server_error" {
		t.Fatalf("refused upstream: %d %s", status, body)
	}
}

func TestClientDisconnectCancelsUpstreamAndStoresPartialOutput(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g, watch := watchedGateway(t, newStore(t), server.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, "POST", g.URL+"/responses",
			strings.NewReader(`{"model":"`+harmony+`?delay_ms=50&tokens=200","input":"hi","stream":true}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer test-key")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		id := ""
		deltas := 0
		for sc.Scan() && deltas < 3 {
			line := sc.Text()
			if strings.HasPrefix(line, "data: ") && id == "" {
				var ev struct {
					Response struct{ ID string } `json:"response"`
				}
				_ = json.Unmarshal([]byte(line[6:]), &ev)
				id = ev.Response.ID
			}
			if strings.HasPrefix(line, "event: response.output_text.delta") || strings.HasPrefix(line, "event: response.reasoning_text.delta") {
				deltas++
			}
		}
		cancel()
		res.Body.Close()
		// The gateway closes its upstream stream before the end: 200 tokens at 50ms take the
		// simulator 10s, so a body read to its end means the gateway kept the upstream generating
		// for a client that had left. Closing an HTTP/1.1 body early drops the connection, which
		// is how vLLM learns to stop.
		watch.stoppedEarly(t, "after the client left")
		// The response is stored terminal, as cancelled.
		var last string
		waitFor(t, 10*time.Second, "terminal stored status", func() bool {
			r, err := g.client.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
			if err != nil {
				last = err.Error()
				return false
			}
			last = string(r.Status)
			return r.Status == "cancelled"
		}, func() string { return "id " + id + ": " + last })
		r, _ := g.client.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
		if len(r.Output) == 0 {
			t.Fatalf("partial output not kept")
		}
	})
}

// streamWatch is an upstream transport that reports how the gateway ended each upstream stream:
// when the gateway closes a streamed /responses body, closed receives whether the body had been
// read to its end.
type streamWatch struct {
	*http.Transport
	closed chan bool
}

// watchedGateway is a gateway (with server settings cfg) whose upstream streams are watched.
func watchedGateway(t *testing.T, st store.Store, cfg server.Config) (*gw, *streamWatch) {
	t.Helper()
	watch := newStreamWatch()
	t.Cleanup(watch.CloseIdleConnections)
	return newGateway(t, st, respgatetest.Options{Server: cfg, Upstream: upstream.Config{Transport: watch}}), watch
}

// stoppedEarly fails the test unless the gateway's next upstream stream is closed before its
// end (when: the circumstance, for the message).
func (w *streamWatch) stoppedEarly(t *testing.T, when string) {
	t.Helper()
	select {
	case readToEnd := <-w.closed:
		if readToEnd {
			t.Fatal("the gateway read the upstream stream to its end " + when)
		}
	case <-time.After(time.Minute): // a hang guard only
		t.Fatal("the gateway never closed the upstream stream " + when)
	}
}

func newStreamWatch() *streamWatch {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true // as the upstream client's own transport (SSE must not sit in gzip)
	return &streamWatch{Transport: tr, closed: make(chan bool, 16)}
}

func (w *streamWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := w.Transport.RoundTrip(req)
	if err == nil && req.Header.Get("Accept") == "text/event-stream" {
		res.Body = &watchedBody{ReadCloser: res.Body, closed: w.closed}
	}
	return res, err
}

type watchedBody struct {
	io.ReadCloser
	closed chan<- bool
	eof    atomic.Bool
	once   sync.Once
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.closed <- b.eof.Load() })
	return err
}
