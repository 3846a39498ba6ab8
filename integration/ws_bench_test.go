package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
)

// BenchmarkToolLoop measures the per-turn latency of a 10-step tool loop (toolLoop) driven the
// three ways a client can: over one WebSocket with store:false (continued from the connection's
// memory), over one WebSocket with store:true, and over HTTP SSE (POST stream:true on a kept-alive
// connection, store:true, since only a stored response can be continued over HTTP). Each client
// reads every event and decodes only the terminal one, the same work on both transports. The
// ms/turn metric is the loop's wall time over its 10 turns.
//
//	go test ./integration/ -run '^$' -bench BenchmarkToolLoop -benchtime 20x
func BenchmarkToolLoop(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			var st store.Store
			if backend == "postgres" {
				var err error
				if st, err = postgres.Open(context.Background(), pgtest.DSN(b)); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = st.Close() })
			}
			g := newGateway(b, st)
			b.Run("ws-store-false", func(b *testing.B) { benchLoop(b, false, wsStepper(b, g)) })
			b.Run("ws-store-true", func(b *testing.B) { benchLoop(b, true, wsStepper(b, g)) })
			b.Run("http-sse-store-true", func(b *testing.B) { benchLoop(b, true, sseStepper(b, g)) })
		})
	}
}

func benchLoop(b *testing.B, store bool, step func(body string) *responses.Response) {
	start := time.Now()
	for b.Loop() {
		toolLoop(b, store, step)
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(10*b.N), "ms/turn")
}

// terminalOf returns the response of a terminal event's JSON, or nil for any other event.
func terminalOf(tb testing.TB, data []byte) *responses.Response {
	var head struct{ Type string }
	_ = json.Unmarshal(data, &head)
	switch head.Type {
	case "response.completed", "response.incomplete", "response.failed":
		var ev struct{ Response responses.Response }
		if err := json.Unmarshal(data, &ev); err != nil {
			tb.Fatal(err)
		}
		return &ev.Response
	case "error":
		tb.Fatalf("error event %s", data)
	}
	return nil
}

func wsStepper(b *testing.B, g *gw) func(string) *responses.Response {
	c, _, err := dialWS(b, wsURL(g))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.CloseNow() })
	return func(body string) *responses.Response {
		msg := `{"type":"response.create",` + strings.TrimPrefix(body, "{")
		if err := c.Write(b.Context(), websocket.MessageText, []byte(msg)); err != nil {
			b.Fatal(err)
		}
		for {
			_, data, err := c.Read(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			if r := terminalOf(b, data); r != nil {
				return r
			}
		}
	}
}

func sseStepper(b *testing.B, g *gw) func(string) *responses.Response {
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	b.Cleanup(client.CloseIdleConnections)
	return func(body string) *responses.Response {
		body = `{"stream":true,` + strings.TrimPrefix(body, "{")
		req, _ := http.NewRequestWithContext(b.Context(), "POST", g.URL+"/responses", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer test-key")
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
		var final *responses.Response
		for sc.Scan() {
			if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok && final == nil {
				final = terminalOf(b, data)
			}
		}
		if final == nil {
			b.Fatalf("no terminal event (%d)", res.StatusCode)
		}
		return final
	}
}
