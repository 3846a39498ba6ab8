package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream/vllmsim"
	"github.com/respgate/respgate/wire"
)

// TestShutdownPastItsDeadlineStoresARunningBackgroundTurnFailed shuts respgate down while a
// background turn is still running and lets --shutdown-timeout pass, so River's hard stop cuts the
// turn (docs/background.md, "Shutdown"): nobody cancelled it, so it must be stored failed with
// error.code server_error and the shutdown's message, not cancelled. On both backends, cut in
// both places a turn waits: mid-stream (a simulator paced at one token a second) and before vLLM
// answered at all (a request the upstream holds).
func TestShutdownPastItsDeadlineStoresARunningBackgroundTurnFailed(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, phase := range []string{"mid-stream", "before-upstream-answers"} {
			t.Run(backend+"/"+phase, func(t *testing.T) {
				t.Parallel()
				dsn := "sqlite:" + filepath.Join(t.TempDir(), "r.db")
				if backend == "postgres" {
					dsn = pgtest.DSN(t)
				}
				testShutdownCutsBackgroundTurn(t, dsn, phase == "mid-stream")
			})
		}
	}
}

func testShutdownCutsBackgroundTurn(t *testing.T, dsn string, midStream bool) {
	sim := vllmsim.New(vllmsim.Options{DecodePerToken: time.Second})
	running, over := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			sim.ServeHTTP(w, r)
			return
		}
		if !midStream {
			// Read the body first: the server notices a closed connection (and ends
			// r.Context()) only once the request body is consumed.
			_, _ = io.Copy(io.Discard, r.Body)
			once.Do(func() { close(running) })
			select { // vLLM never answers; the cut ends the call
			case <-r.Context().Done():
			case <-over:
				t.Error("the upstream call outlived respgate")
			}
			return
		}
		sim.ServeHTTP(&firstWrite{ResponseWriter: w, once: &once, seen: running}, r)
	}))
	defer up.Close()
	defer close(over)
	id, done, out, cancel := runQueued(t, []string{"--upstream-url", up.URL + "/v1", "--shutdown-timeout", "300ms"}, dsn, "write a long story")
	select {
	case <-running: // a worker runs the turn: upstream has it (and, mid-stream, has sent events)
	case err := <-done:
		t.Fatalf("run returned %v before the turn ran:\n%s", err, out.Bytes())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.Bytes())
	}
	if !bytes.Contains(out.Bytes(), []byte("Hard stop")) {
		t.Errorf("the turn ended before the drain deadline: no hard stop was logged:\n%s", out.Bytes())
	}
	r := storedResponse(t, dsn, id)
	var stored struct{ Code, Message string }
	if len(r.Error) > 0 {
		if err := json.Unmarshal(r.Error, &stored); err != nil {
			t.Fatal(err)
		}
	}
	const msg = "The gateway shut down before the response finished; retry it."
	if r.Status != wire.StatusFailed || stored.Code != "server_error" || stored.Message != msg {
		t.Errorf("the background turn cut by shutdown is stored %q with error %s, want failed, server_error, %q\n%s", r.Status, r.Error, msg, out.Bytes())
	}
}

// runQueued runs respgate (run) on a loopback port with args and RESPGATE_DATABASE_URL dsn and,
// once it listens, creates a background response with input. It returns the response's id, the
// run's result, its log, and cancel, which stops it as a signal does (also at the test's end).
func runQueued(t *testing.T, args []string, dsn, input string) (id string, done <-chan error, out *syncBuffer, cancel context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	out = new(syncBuffer)
	result := make(chan error, 1)
	go func() {
		result <- run(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), env(map[string]string{"RESPGATE_DATABASE_URL": dsn}), out)
	}()
	addr := logged(t, out, result, "respgate listening")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/responses",
		strings.NewReader(`{"model":"`+vllmsim.HarmonyModel+`","input":`+strconv.Quote(input)+`,"background":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var queued struct{ ID string }
	err = json.NewDecoder(resp.Body).Decode(&queued)
	_ = resp.Body.Close()
	if err != nil || queued.ID == "" {
		t.Fatalf("background POST: %d, %v", resp.StatusCode, err)
	}
	return queued.ID, result, out, cancel
}

// storedResponse reads response id (of any tenant) from the store at dsn.
func storedResponse(t *testing.T, dsn, id string) *store.Response {
	t.Helper()
	st, err := openStore(t.Context(), dsn, 2, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	loc, err := st.(store.Admin).ResponseLocate(t.Context(), &store.ResponseLocateParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := st.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: loc.Tenant, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// firstWrite closes seen at the first body write its handler flushes: the stream has begun.
type firstWrite struct {
	http.ResponseWriter
	once *sync.Once
	seen chan struct{}
}

func (f *firstWrite) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
	f.once.Do(func() { close(f.seen) })
}
