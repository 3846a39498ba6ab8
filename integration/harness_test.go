package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
)

const (
	harmony = "openai/gpt-oss-sim"
	parser  = "Qwen/Qwen3-sim"
)

// TestMain uses pgtest.Main: it stops a throwaway Postgres if one was started and runs goleak.
func TestMain(m *testing.M) { pgtest.Main(m) }

// backends runs f once per store backend, each on a fresh store.
func backends(t *testing.T, f func(t *testing.T, newStore func(t *testing.T) store.Store)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, func(t *testing.T) store.Store {
			st, err := postgres.Open(context.Background(), pgtest.DSN(t))
			if err != nil {
				t.Fatalf("open postgres: %v", err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, func(t *testing.T) store.Store { return nil }) // respgatetest's default: SQLite in t.TempDir()
	})
}

// realStore is newStore's store, or, for the SQLite backend (whose newStore leaves the store to
// respgatetest), a SQLite store of its own in t.TempDir(): for a test that wraps the store.
func realStore(t *testing.T, newStore func(t *testing.T) store.Store) store.Store {
	t.Helper()
	if st := newStore(t); st != nil {
		return st
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

type gw struct {
	*respgatetest.Gateway
	client openai.Client
}

func newGateway(t testing.TB, st store.Store, opts ...respgatetest.Options) *gw {
	t.Helper()
	var o respgatetest.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Store = st
	g := respgatetest.New(t, o)
	// Every response object and streamed event the client receives is checked against the Open
	// Responses schema (openresponses_test.go).
	return &gw{Gateway: g, client: openai.NewClient(option.WithBaseURL(g.URL), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
		option.WithMiddleware(conformance(t)))}
}

// params turns a raw JSON body into openai-go params, so tests send exactly the bytes they mean.
func params(body string) responses.ResponseNewParams {
	return param.Override[responses.ResponseNewParams](json.RawMessage(body))
}

func (g *gw) create(t *testing.T, body string) *responses.Response {
	t.Helper()
	r, err := g.client.Responses.New(t.Context(), params(body))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return r
}

// streamed is one streamed turn as openai-go decoded it.
type streamed struct {
	events []responses.ResponseStreamEventUnion
	final  *responses.Response
}

func (g *gw) stream(t *testing.T, body string) *streamed {
	t.Helper()
	s := g.client.Responses.NewStreaming(t.Context(), params(body))
	defer s.Close()
	var out streamed
	for s.Next() {
		ev := s.Current()
		out.events = append(out.events, ev)
		switch ev.Type {
		case "response.completed", "response.incomplete", "response.failed":
			r := ev.Response
			out.final = &r
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if out.final == nil {
		t.Fatalf("stream ended without a terminal event (%d events)", len(out.events))
	}
	checkStreamShape(t, out.events)
	return &out
}

// checkStreamShape asserts the rules strict SDK helpers depend on (docs/wire.md §5.3-5.4): created
// first; sequence numbers dense from 0; dense output_index in announcement order; every delta
// after its item and part were announced; content_index dense per item; exactly one terminal
// event, last; its output equals the items of the output_item.done events; no top-level error.
func checkStreamShape(t *testing.T, events []responses.ResponseStreamEventUnion) {
	t.Helper()
	if len(events) == 0 || events[0].Type != "response.created" {
		t.Fatalf("first event is not response.created")
	}
	var (
		respID   = events[0].Response.ID
		ids      []string // by output_index
		parts    = map[int]int{}
		done     = map[int]string{}
		terminal int
	)
	for i, ev := range events {
		raw := ev.RawJSON()
		var top map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &top); err != nil {
			t.Fatalf("event %d not JSON: %v", i, err)
		}
		if _, ok := top["error"]; ok {
			t.Fatalf("event %d (%s) has a top-level error key", i, ev.Type)
		}
		if int(ev.SequenceNumber) != i {
			t.Fatalf("event %d (%s) has sequence_number %d", i, ev.Type, ev.SequenceNumber)
		}
		if terminal > 0 {
			t.Fatalf("event %s after the terminal event", ev.Type)
		}
		oi := int(ev.OutputIndex)
		switch ev.Type {
		case "response.created", "response.in_progress":
			if ev.Response.ID != respID {
				t.Fatalf("response id changed: %s vs %s", ev.Response.ID, respID)
			}
		case "response.output_item.added":
			if oi != len(ids) {
				t.Fatalf("output_item.added with output_index %d, want %d", oi, len(ids))
			}
			ids = append(ids, ev.Item.ID)
		case "response.output_item.done":
			if oi >= len(ids) || ids[oi] != ev.Item.ID {
				t.Fatalf("output_item.done for unannounced item %d (%s)", oi, ev.Item.ID)
			}
			done[oi] = ev.Item.RawJSON()
		case "response.content_part.added":
			if oi >= len(ids) || ids[oi] != ev.ItemID {
				t.Fatalf("content_part.added for unannounced item %d", oi)
			}
			if int(ev.ContentIndex) != parts[oi] {
				t.Fatalf("content_part.added index %d, want %d", ev.ContentIndex, parts[oi])
			}
			parts[oi]++
		case "response.output_text.delta", "response.reasoning_text.delta", "response.refusal.delta",
			"response.output_text.done", "response.reasoning_text.done", "response.content_part.done":
			if oi >= len(ids) || ids[oi] != ev.ItemID || int(ev.ContentIndex) >= parts[oi] {
				t.Fatalf("%s for unannounced item/part %d/%d", ev.Type, oi, ev.ContentIndex)
			}
		case "response.function_call_arguments.delta", "response.function_call_arguments.done":
			if oi >= len(ids) || ids[oi] != ev.ItemID {
				t.Fatalf("%s for unannounced item %d", ev.Type, oi)
			}
		case "response.completed", "response.incomplete", "response.failed":
			terminal++
			if ev.Response.ID != respID {
				t.Fatalf("terminal response id %s, want %s", ev.Response.ID, respID)
			}
			if len(ev.Response.Output) != len(done) {
				t.Fatalf("terminal output has %d items, %d were done", len(ev.Response.Output), len(done))
			}
			for k, it := range ev.Response.Output {
				if !jsonEqual(it.RawJSON(), done[k]) {
					t.Fatalf("terminal output[%d] differs from its output_item.done:\n%s\n%s", k, it.RawJSON(), done[k])
				}
			}
		default:
			if !strings.HasPrefix(ev.Type, "response.") {
				t.Fatalf("unexpected event type %q", ev.Type)
			}
		}
	}
	if terminal != 1 {
		t.Fatalf("%d terminal events", terminal)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// rawDo sends a raw HTTP request to the gateway and returns status and body.
func rawDo(t *testing.T, method, url, body string, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

// envelope decodes an OpenAI error envelope, failing the test if the body is not one.
func envelope(t *testing.T, body []byte) (typ, code, param, msg string) {
	t.Helper()
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		t.Fatalf("not an error envelope: %s", body)
	}
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return e.Error.Type, code, param, e.Error.Message
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			extra := ""
			for _, f := range detail {
				extra += " (" + f() + ")"
			}
			t.Fatalf("timed out waiting for %s%s", what, extra)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// upstreamInput decodes the "input" array of a body the simulator received.
func upstreamInput(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var req struct {
		Input []map[string]any `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("upstream body: %v", err)
	}
	return req.Input
}

func outputText(r *responses.Response) string { return r.OutputText() }

func responsesGetParams() responses.ResponseGetParams { return responses.ResponseGetParams{} }

func inputItemsParams() responses.InputItemListParams { return responses.InputItemListParams{} }
