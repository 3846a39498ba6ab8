package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log sink safe for the client's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// A request vLLM never received logs, at warn, the URL it went to (without credentials) and why
// it failed: a 502 upstream_unreachable is diagnosable from the log alone.
func TestUnreachableUpstreamLogsTheURLAndTheCauseAtWarn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connection refused
	var logs lockedBuffer
	c, err := New(Config{BaseURL: "http://ops:hunter2@" + addr + "/v1", APIKey: "sk-upstream-secret",
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if _, err := c.Create(t.Context(), []byte(`{"input":"PROMPT-TEXT"}`)); err == nil {
		t.Fatal("Create succeeded against a closed port")
	}
	lines := logs.lines(t)
	if len(lines) != 1 {
		t.Fatalf("want one log line, got %d: %v", len(lines), lines)
	}
	l := lines[0]
	if l["level"] != "WARN" || l["msg"] != "upstream request failed" || l["kind"] != "unreachable" ||
		l["url"] != "http://REDACTED@"+addr+"/v1/responses" || !strings.Contains(l["cause"].(string), "connection refused") {
		t.Errorf("log line %v", l)
	}
	all := logs.b.String()
	for _, secret := range []string{"hunter2", "ops:", "sk-upstream-secret", "PROMPT-TEXT"} {
		if strings.Contains(all, secret) {
			t.Errorf("the log holds %q: %s", secret, all)
		}
	}
}

// A 404 from an upstream URL without /v1 says so, and never logs vLLM's message (it may quote the
// request).
func TestNotFoundUpstreamHintsAtTheMissingV1(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"detail":"Not Found QUOTED-INPUT"}`))
	}))
	defer srv.Close()
	var logs lockedBuffer
	c, err := New(Config{BaseURL: srv.URL, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if _, err := c.Create(t.Context(), []byte(`{}`)); err == nil {
		t.Fatal("want an error")
	}
	lines := logs.lines(t)
	if len(lines) != 1 || lines[0]["level"] != "WARN" || lines[0]["upstream_status"] != float64(404) ||
		!strings.Contains(lines[0]["hint"].(string), "/v1") {
		t.Fatalf("log %v", lines)
	}
	if strings.Contains(logs.b.String(), "QUOTED-INPUT") {
		t.Errorf("vLLM's message reached the log: %s", logs.b.String())
	}
}

// A caller that gives up is not a failure of vLLM: nothing is logged.
func TestCanceledCallIsNotLogged(t *testing.T) {
	var logs lockedBuffer
	c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithCancel(t)
	cancel()
	_, _ = c.Create(ctx, []byte(`{}`))
	if logs.b.Len() != 0 {
		t.Errorf("logged %s", logs.b.String())
	}
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}
