package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/fleet"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// The server in front of a fleet (upstream/fleet): turns reach a replica, the models are the
// fleet's, an unserved model is 404 model_not_found and a fleet with every replica down 503 with
// Retry-After, each in the OpenAI envelope; the fleet's instruments are on /metrics.
func TestServerInFrontOfAFleet(t *testing.T) {
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	a := httptest.NewServer(vllmsim.New(vllmsim.Options{MaxModelLen: 8192}))
	b := httptest.NewServer(vllmsim.New(vllmsim.Options{MaxModelLen: 4096}))
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	fl, err := fleet.New(t.Context(), fleet.Config{
		Topology: fleet.Topology{Pools: []fleet.Pool{{Name: "sim", URLs: []string{a.URL + "/v1", b.URL + "/v1"}}},
			Health: fleet.Health{Interval: time.Hour}},
		Client: upstream.Config{Transport: tr},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.Close)
	s, err := New(t.Context(), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sq, fl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })

	if code, body := call(t, s, http.MethodPost, "/v1/responses", syncBody); code != http.StatusOK {
		t.Fatalf("turn: %d %s", code, body)
	}
	code, body := call(t, s, http.MethodGet, "/v1/models/"+vllmsim.HarmonyModel, "")
	if code != http.StatusOK || !strings.Contains(body, `"max_model_len":4096`) {
		t.Fatalf("models.retrieve: %d %s, want the smallest max_model_len", code, body)
	}
	code, body = call(t, s, http.MethodPost, "/v1/responses", `{"model":"nobody/serves-this","input":"hi"}`)
	if e := envelope(t, body); code != http.StatusNotFound || deref(e.Code) != "model_not_found" {
		t.Fatalf("unserved model: %d %s", code, body)
	}
	if code, body := call(t, s, http.MethodGet, "/metrics", ""); code != http.StatusOK ||
		!strings.Contains(body, "respgate_upstream_replica_requests_total") || !strings.Contains(body, "respgate_upstream_pool_routed_total") {
		t.Fatalf("/metrics lacks the fleet's instruments: %d", code)
	}

	a.Close()
	b.Close()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/responses", strings.NewReader(syncBody))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if e := envelope(t, rec.Body.String()); rec.Code != http.StatusServiceUnavailable || deref(e.Code) != "upstream_unavailable" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("every replica down: %d %s (Retry-After %q)", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
}
