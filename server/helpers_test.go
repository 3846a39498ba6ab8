package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// fakeStore answers the few calls these tests allow. Every other method is the nil embedded
// interface: calling it panics, which the server turns into a 500, so a test that expects a 400
// also proves the request never reached the store.
type fakeStore struct {
	store.Store
	conversations atomic.Int64
}

func (*fakeStore) SecretGetOrCreate(_ context.Context, p *store.SecretGetOrCreateParams) ([]byte, error) {
	return p.Generate()
}

// ResponseQueuedCount answers the queue-depth gauge of /metrics: nothing is queued.
func (*fakeStore) ResponseQueuedCount(context.Context, *store.ResponseQueuedCountParams) (int, error) {
	return 0, nil
}

func (f *fakeStore) ConversationCreate(context.Context, *store.ConversationCreateParams) error {
	f.conversations.Add(1)
	return nil
}

// newIntakeServer is a Server on fakeStore whose upstream counts the requests it gets.
func newIntakeServer(t *testing.T, cfg Config) (*Server, *atomic.Int64) {
	t.Helper()
	var upstreamCalls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls.Add(1)
		http.Error(w, "unexpected", http.StatusTeapot)
	}))
	t.Cleanup(up.Close)
	uc, err := upstream.New(upstream.Config{BaseURL: up.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(t.Context(), cfg, &fakeStore{}, upstream.Single(uc))
	if err != nil {
		t.Fatal(err)
	}
	return s, &upstreamCalls
}

// do serves one request in process and decodes the envelope when there is one.
func do(t *testing.T, s *Server, method, target, body string) (*httptest.ResponseRecorder, wire.ErrorBody) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var env struct{ Error wire.ErrorBody }
	_ = json.Unmarshal(rec.Body.Bytes(), &env)
	return rec, env.Error
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// newRequest is a request with the test tenant's key and a JSON body.
func newRequest(t *testing.T, method, target, body string) *http.Request {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	return req
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
