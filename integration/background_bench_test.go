package integration

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
)

// BenchmarkFirstEvent measures the time from POST /v1/responses (stream:true) to the first event
// the client reads, for a foreground turn and a background one (background:true, whose events
// the create call follows from the event log a River worker writes), side by side on each
// backend. ms/first_event is that time; the rest of each stream is read outside the timer.
//
//	go test ./integration/ -run '^$' -bench BenchmarkFirstEvent -benchtime 30x
func BenchmarkFirstEvent(b *testing.B) {
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
			for _, mode := range []string{"foreground", "background"} {
				body := `{"model":"` + harmony + `","input":"hello","stream":true}`
				if mode == "background" {
					body = `{"model":"` + harmony + `","input":"hello","stream":true,"background":true}`
				}
				b.Run(mode, func(b *testing.B) {
					var total time.Duration
					for b.Loop() {
						total += firstEvent(b, g.URL, body)
					}
					b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/first_event")
				})
			}
		})
	}
}

// firstEvent posts body and returns the time until the first data line; it reads the rest.
func firstEvent(b *testing.B, url, body string) time.Duration {
	req, err := http.NewRequestWithContext(b.Context(), "POST", url+"/responses", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer test-key")
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			b.Fatalf("stream ended before its first event: %v", err)
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	d := time.Since(start)
	_, _ = io.Copy(io.Discard, br)
	return d
}
