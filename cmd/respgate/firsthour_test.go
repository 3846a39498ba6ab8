package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/version"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// `respgate version` and --version print the build; the start-up line carries the version too.
func TestVersionCommandAndFlag(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var o, e bytes.Buffer
		if err := dispatch(t.Context(), args, env(nil), &o, &e); err != nil {
			t.Fatal(err)
		}
		if o.String() != version.Get().String()+"\n" || e.Len() != 0 {
			t.Errorf("%v: stdout %q stderr %q", args, o.String(), e.String())
		}
	}
}

// A mistyped flag or a malformed value gets one line naming the flag, its variable and the form
// expected, not the whole usage.
func TestBadFlagsGetOneActionableLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want []string
	}{
		{args: []string{"--shutdown-timout", "10s"}, want: []string{"unknown flag --shutdown-timout", "respgate -h"}},
		{args: []string{"--shutdown-timeout", "10"}, want: []string{"--shutdown-timeout (RESPGATE_SHUTDOWN_TIMEOUT)", "30s", `not "10"`}},
		{vars: map[string]string{"RESPGATE_SHUTDOWN_TIMEOUT": "ten"}, want: []string{"--shutdown-timeout (RESPGATE_SHUTDOWN_TIMEOUT)", "1h30m", `not "ten"`}},
		{args: []string{"--max-streams=lots"}, want: []string{"--max-streams (RESPGATE_MAX_STREAMS)", "whole number", `not "lots"`}},
		{vars: map[string]string{"RESPGATE_MAX_BODY_BYTES": "32MiB"}, want: []string{"--max-body-bytes (RESPGATE_MAX_BODY_BYTES)", "bytes, no unit"}},
	} {
		var o, e bytes.Buffer
		err := dispatch(t.Context(), tc.args, env(tc.vars), &o, &e)
		if err == nil {
			t.Fatalf("%v %v: no error", tc.args, tc.vars)
		}
		msg := err.Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v %v: %q lacks %q", tc.args, tc.vars, msg, w)
			}
		}
		if strings.Contains(msg, "\n") || o.Len()+e.Len() > 0 {
			t.Errorf("%v: more than one line: %q, printed %q %q", tc.args, msg, o.String(), e.String())
		}
	}
}

// sqlite: paths: relative and absolute forms work; sqlite://relative (which once created a file at
// the filesystem root) is refused with the spelling to use.
func TestSQLiteURLSpellings(t *testing.T) {
	for dsn, want := range map[string]string{
		"sqlite:./data/x.db": "./data/x.db",
		"sqlite:data/x.db":   "data/x.db",
		"sqlite:/var/x.db":   "/var/x.db",
		"sqlite:///var/x.db": "/var/x.db",
		"sqlite::memory:":    ":memory:",
	} {
		if got, err := sqlitePath(dsn); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", dsn, got, err, want)
		}
	}
	for _, dsn := range []string{"sqlite://./data/x.db", "sqlite://data/x.db", "sqlite:"} {
		_, err := sqlitePath(dsn)
		if err == nil || !strings.Contains(err.Error(), "RESPGATE_DATABASE_URL") {
			t.Errorf("%s: %v", dsn, err)
		}
	}
	if _, err := sqlitePath("sqlite://./data/x.db"); err == nil || !strings.Contains(err.Error(), "write sqlite:./data/x.db") {
		t.Errorf("the error does not give the right spelling: %v", err)
	}
}

// The start-up log names the version, the SQLite file by its absolute path, the schema version
// and whether this start migrated it.
func TestStartupLogNamesTheStoreFileAndSchema(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	start := func() map[string]map[string]any {
		ctx, cancel := context.WithCancel(t.Context())
		var out syncBuffer
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"--listen", "127.0.0.1:0"}, env(map[string]string{"RESPGATE_DATABASE_URL": "sqlite:./data/r.db"}), &out)
		}()
		logged(t, &out, done, "respgate listening")
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		lines := map[string]map[string]any{}
		for l := range bytes.SplitSeq(out.Bytes(), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil {
				lines[m["msg"].(string)] = m
			}
		}
		return lines
	}
	abs := filepath.Join(dir, "data", "r.db")
	for i, migrated := range []string{"new store", "none pending"} {
		lines := start()
		st := lines["store ready"]
		if st == nil || st["backend"] != "sqlite" || st["path"] != abs || st["schema_version"] != float64(latestSchema(t)) || st["migrated"] != migrated {
			t.Errorf("start %d: store line %v, want %s at version %d, %s", i, st, abs, latestSchema(t), migrated)
		}
		if v := lines["respgate starting"]["version"]; v != version.Get().Version {
			t.Errorf("start-up line version %v", v)
		}
	}
	if _, err := os.Stat(abs); err != nil {
		t.Errorf("the file is not where the log says: %v", err)
	}
}

// The start-up probe of /models warns when vLLM is unreachable or the URL lacks /v1, with the
// URL (no password) and a hint; a working upstream gets an info line.
func TestUpstreamProbeWarnsWithAHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		name, base, level, want string
	}{
		{"unreachable", "http://u:pw-SECRET@" + closed + "/v1", "WARN", "vLLM is running"},
		{"no /v1", srv.URL, "WARN", "should end in /v1"},
		{"working", srv.URL + "/v1", "INFO", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&out, nil))
			up, err := upstream.New(upstream.Config{BaseURL: tc.base})
			if err != nil {
				t.Fatal(err)
			}
			defer up.CloseIdleConnections()
			probeUpstream(t.Context(), upstream.Single(up), tc.base, log)
			var m map[string]any
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if m["level"] != tc.level || !strings.Contains(m["url"].(string), "/models") {
				t.Errorf("line %v", m)
			}
			if tc.want != "" && !strings.Contains(m["hint"].(string), tc.want) {
				t.Errorf("hint %q lacks %q", m["hint"], tc.want)
			}
			if strings.Contains(out.String(), "pw-SECRET") {
				t.Errorf("the password reached the log: %s", out.String())
			}
			if !startupGrep(t).Match(out.Bytes()) {
				t.Errorf("docs/operations.md's grep of the start-up lines misses %s", out.String())
			}
		})
	}
}

// startupGrep is the `grep -E` docs/operations.md tells an operator to run over the log after an
// install: it must find the probe's line whatever its outcome.
func startupGrep(t *testing.T) *regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`logs deploy/rg-respgate \| grep -E '([^']+)'`).FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/operations.md has no grep -E of the start-up lines")
	}
	return regexp.MustCompile(string(m[1]))
}

// A clean shutdown stops the background workers gracefully within the drain: River logs no hard
// stop, and "respgate stopped" is the last line.
func TestCleanShutdownLogsNoHardStop(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0"},
			env(map[string]string{"RESPGATE_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "r.db")}), &out)
	}()
	logged(t, &out, done, "River client started")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out.Bytes())), "\n")
	if bytes.Contains(out.Bytes(), []byte("Hard stop")) || !strings.Contains(lines[len(lines)-1], `"msg":"respgate stopped"`) {
		t.Errorf("shutdown log:\n%s", strings.Join(lines[max(0, len(lines)-4):], "\n"))
	}
}

// A background turn running when the signal comes finishes within the drain: River is stopped
// gracefully by the server's Shutdown, which serve waits for, so the turn is stored completed and
// River logs no hard stop after "respgate stopped". The turn is held upstream until the drain
// began; it is released when serve logged "respgate stopped" (the regression: serve returned
// before Shutdown did, cancelling River's stop context, so River hard-stopped and the turn was
// cut), when its call was cancelled (the other regression: River started on the signal's context,
// which cancels running jobs at once), or after a second, whichever comes first. The second only
// gives a regression the time to show; the test passes or fails on what was logged and stored.
func TestShutdownDrainsARunningBackgroundTurnWithoutAHardStop(t *testing.T) {
	sim := vllmsim.New(vllmsim.Options{})
	held, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			close(held) // one turn only
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		sim.ServeHTTP(w, r)
	}))
	defer up.Close()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "r.db")
	id, done, out, cancel := runQueued(t, []string{"--upstream-url", up.URL + "/v1", "--shutdown-timeout", "30s"}, dsn, "hi")
	<-held // a worker is running the turn
	cancel()
	logged(t, out, done, "shutting down: draining in-flight requests")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for !bytes.Contains(out.Bytes(), []byte(`"msg":"respgate stopped"`)) {
			select {
			case <-time.After(5 * time.Millisecond):
			case <-release:
				return
			}
		}
	}()
	select {
	case <-stopped:
	case <-time.After(time.Second):
	}
	close(release)
	<-stopped
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(out.Bytes())), "\n")
	if bytes.Contains(out.Bytes(), []byte("Hard stop")) || !strings.Contains(lines[len(lines)-1], `"msg":"respgate stopped"`) {
		t.Errorf("shutdown log:\n%s", strings.Join(lines[max(0, len(lines)-6):], "\n"))
	}
	var view struct{ Status string }
	if err := json.Unmarshal([]byte(mustAdmin(t, dsn, "inspect", id)), &view); err != nil || view.Status != "completed" {
		t.Errorf("the background turn running at the signal is %q (%v), want completed", view.Status, err)
	}
}
