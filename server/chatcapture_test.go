package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/logtest"

	"github.com/respgate/respgate/store"
)

// replaySaves is the real store that records what chat turns save and purge.
type replaySaves struct {
	store.Store
	mu        sync.Mutex
	saves     []store.ReplayRecordSaveParams
	purges    []store.ReplayPurgeParams
	failSaves bool
}

func (r *replaySaves) ReplayRecordSave(ctx context.Context, p *store.ReplayRecordSaveParams) error {
	r.mu.Lock()
	r.saves = append(r.saves, *p)
	fail := r.failSaves
	r.mu.Unlock()
	if fail {
		return errors.New("connection reset (injected)")
	}
	return r.Store.ReplayRecordSave(ctx, p)
}

func (r *replaySaves) ReplayPurge(ctx context.Context, p *store.ReplayPurgeParams) (int, error) {
	r.mu.Lock()
	r.purges = append(r.purges, *p)
	r.mu.Unlock()
	return r.Store.ReplayPurge(ctx, p)
}

// chatSaves serves one chat completion of model on a server with cfg and returns what it saved.
func chatSaves(t *testing.T, cfg Config, model string) []store.ReplayRecordSaveParams {
	t.Helper()
	rs := &replaySaves{}
	s := newSimServer(t, cfg, func(st store.Store) store.Store { rs.Store = st; return rs })
	code, body := call(t, s, http.MethodPost, "/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
	if strings.Contains(model, "status=") == (code == http.StatusOK) {
		t.Fatalf("chat completion of %s: %d %s", model, code, body)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.saves
}

// A completed chat turn stores its items as a replay record under the history it answered; a
// failed one stores no record, only blocks the older records at its position; a record larger
// than ChatReplayMaxRecordBytes is not stored (one of exactly that size is).
func TestChatCaptureStoresCompletedTurnsWithinTheRecordBound(t *testing.T) {
	done := chatSaves(t, Config{}, "openai/gpt-oss-sim")
	if len(done) != 1 || done[0].Record == nil || done[0].Block != "" || len(done[0].Record.Items) == 0 {
		t.Fatalf("completed turn saved %+v, want one record with its items", done)
	}
	size := 0
	for _, it := range done[0].Record.Items {
		size += len(it.JSON)
	}

	failed := chatSaves(t, Config{}, "openai/gpt-oss-sim?status=500")
	if len(failed) != 1 || failed[0].Record != nil || failed[0].Block == "" {
		t.Fatalf("failed turn saved %+v, want no record and a block at its position", failed)
	}

	if at := chatSaves(t, Config{ChatReplayMaxRecordBytes: size}, "openai/gpt-oss-sim"); len(at) != 1 || at[0].Record == nil {
		t.Fatalf("a record of exactly the bound (%d bytes) was not stored: %+v", size, at)
	}
	if over := chatSaves(t, Config{ChatReplayMaxRecordBytes: size - 1}, "openai/gpt-oss-sim"); len(over) != 1 || over[0].Record != nil || over[0].Block == "" {
		t.Fatalf("a record of %d bytes was stored under a bound of %d: %+v", size, size-1, over)
	}
}

// Purge deletes the chat replay records unused for ChatReplayIdle: the cut-off is now minus the idle time.
func TestChatReplayPurgeCutsOffAtTheIdleTime(t *testing.T) {
	rs := &replaySaves{}
	s := newSimServer(t, Config{ChatReplayIdle: time.Hour}, func(st store.Store) store.Store { rs.Store = st; return rs })
	before := time.Now()
	s.engine.Purge(t.Context())
	after := time.Now()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.purges) == 0 {
		t.Fatal("no purge")
	}
	if cut := rs.purges[0].Before; cut.Before(before.Add(-time.Hour)) || cut.After(after.Add(-time.Hour)) {
		t.Fatalf("purged records unused since %v, want an hour before %v", cut, before)
	}
}

// A capture the store refuses costs the replay, never the answer, and is logged as a warning;
// a purge that deleted records says how many, and one that deleted none says nothing.
func TestChatCaptureAndPurgeLogWhatHappened(t *testing.T) {
	for _, fail := range []bool{false, true} {
		logs := &logtest.Records{}
		rs := &replaySaves{failSaves: fail}
		s := newSimServer(t, Config{Logger: slog.New(logs), ChatReplayIdle: time.Hour},
			func(st store.Store) store.Store { rs.Store = st; return rs })
		if code, body := call(t, s, http.MethodPost, "/v1/chat/completions", `{"model":"openai/gpt-oss-sim","messages":[{"role":"user","content":"hi"}]}`); code != http.StatusOK {
			t.Fatalf("chat completion with failing saves=%t: %d %s", fail, code, body)
		}
		warned := false
		for _, l := range logs.Snapshot() {
			warned = warned || strings.HasPrefix(l, "WARN chat replay record not saved")
		}
		if warned != fail {
			t.Fatalf("saves failing=%t: warned=%t: %q", fail, warned, logs.Snapshot())
		}
	}

	purgeAfter := func(idle time.Duration) []string {
		logs := &logtest.Records{}
		s := newSimServer(t, Config{Logger: slog.New(logs), ChatReplayIdle: idle}, nil)
		if code, body := call(t, s, http.MethodPost, "/v1/chat/completions", `{"model":"openai/gpt-oss-sim","messages":[{"role":"user","content":"hi"}]}`); code != http.StatusOK {
			t.Fatalf("chat completion: %d %s", code, body)
		}
		s.engine.Purge(t.Context())
		var out []string
		for _, l := range logs.Snapshot() {
			if strings.Contains(l, "purged idle chat replay records") {
				out = append(out, l)
			}
		}
		return out
	}
	if got := purgeAfter(time.Hour); len(got) != 0 { // the record was used just now: nothing is an hour idle
		t.Fatalf("a purge that deleted nothing logged %q", got)
	}
	if got := purgeAfter(time.Nanosecond); len(got) != 1 || !strings.Contains(got[0], "count=1") { // every record is idle
		t.Fatalf("a purge of one record logged %q", got)
	}
}
