// Package respgatetest runs respgate in-process for tests, in the spirit of net/http/httptest:
// the gateway with the vLLM simulator as its model and a throwaway SQLite store in the test's temp
// directory, on a loopback port. Point any OpenAI SDK at Gateway.URL and read what the model was
// sent with UpstreamRequests. example_test.go shows a test of an application written this way;
// docs/testing.md explains the simulator's deterministic answers and per-request faults.
//
// It holds no logic of its own: it wires the same server, store and simulator respgate runs with.
package respgatetest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// Options configures a Gateway. The zero value is ready: SQLite in the test's temp dir, the
// simulator with its default (quirky, vLLM-faithful) behaviour, default server settings.
type Options struct {
	// Store, when set, is used instead of a fresh SQLite store; the caller closes it.
	Store store.Store
	// Sim configures the simulator.
	Sim vllmsim.Options
	// Server configures the gateway (limits, keys, tool policy…).
	Server server.Config
	// UpstreamURL, when set, makes the gateway talk to this vLLM base URL instead of the
	// simulator (the simulator still starts, unused).
	UpstreamURL string
	// Upstream overrides fields of the upstream client's configuration (BaseURL is always the
	// simulator's).
	Upstream upstream.Config
}

// Gateway is a running respgate with its simulator. Everything stops in t.Cleanup.
type Gateway struct {
	// URL is the gateway's OpenAI base URL, ending in /v1.
	URL string
	// SimURL is the simulator's base URL, ending in /v1 (to compare against vLLM directly).
	SimURL string
	Sim    *vllmsim.Sim
	Store  store.Store
	Server *server.Server
	http   *httptest.Server
}

// New starts a Gateway for the test. It fails the test if anything cannot start.
func New(t testing.TB, opts ...Options) *Gateway {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx := context.Background()
	st := o.Store
	if st == nil {
		var err error
		st, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "respgate.db"))
		if err != nil {
			t.Fatalf("respgatetest: open sqlite store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
	}
	sim := vllmsim.New(o.Sim)
	simHTTP := httptest.NewServer(sim)
	t.Cleanup(simHTTP.Close)

	ucfg := o.Upstream
	ucfg.BaseURL = simHTTP.URL + "/v1"
	if o.UpstreamURL != "" {
		ucfg.BaseURL = o.UpstreamURL
	}
	up, err := upstream.New(ucfg)
	if err != nil {
		t.Fatalf("respgatetest: upstream client: %v", err)
	}
	scfg := o.Server
	if scfg.Logger == nil {
		scfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := server.New(ctx, scfg, st, upstream.Single(up))
	if err != nil {
		t.Fatalf("respgatetest: server: %v", err)
	}
	// Background responses and housekeeping run on River in the store (docs/background.md).
	if _, ok := st.(store.Jobs); ok {
		// Gateways sharing one store object share its workers: the first one's serve them all.
		if err := srv.StartBackground(ctx); err != nil && !errors.Is(err, store.ErrJobsStarted) {
			t.Fatalf("respgatetest: background workers: %v", err)
		}
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Listener = server.Listener(hs.Listener)
	hs.Start()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		// Stop the server's background work (a failed record still being stored) and wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return &Gateway{URL: hs.URL + "/v1", SimURL: simHTTP.URL + "/v1", Sim: sim, Store: st, Server: srv, http: hs}
}

// UpstreamRequests returns the bodies the simulated vLLM received, in order.
func (g *Gateway) UpstreamRequests() [][]byte {
	reqs := g.Sim.Requests()
	out := make([][]byte, 0, len(reqs))
	for _, r := range reqs {
		if r.Method == "POST" {
			out = append(out, r.Body)
		}
	}
	return out
}
