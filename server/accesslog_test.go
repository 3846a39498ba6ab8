package server

import (
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

var responseIDPattern = regexp.MustCompile(`"id":"(resp_[^"]+)"`)

// A stored foreground turn, streamed or not, is logged in one line: its request's access line
// carries the stored response's id, status and sizes, and no "response stored" line is written.
// A turn with store:false adds nothing to its line.
func TestAStoredTurnIsLoggedOnItsAccessLine(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		stored     bool
	}{
		{"non-streamed", `{"model":"openai/gpt-oss-sim","input":"hi"}`, true},
		{"streamed", `{"model":"openai/gpt-oss-sim","input":"hi","stream":true}`, true},
		{"store false", `{"model":"openai/gpt-oss-sim","input":"hi","store":false}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logRecords{}
			s := newSimServer(t, Config{Logger: slog.New(logs)}, nil)
			code, body := call(t, s, http.MethodPost, "/v1/responses", tc.body)
			if code != http.StatusOK {
				t.Fatalf("turn: %d %s", code, body)
			}
			m := responseIDPattern.FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("no response id in %s", body)
			}
			var access []string
			for _, l := range logs.snapshot() {
				if strings.HasPrefix(l, "INFO response stored") {
					t.Errorf("a foreground turn wrote a line of its own: %q", l)
				}
				if strings.HasPrefix(l, "INFO request ") {
					access = append(access, l)
				}
			}
			if len(access) != 1 {
				t.Fatalf("access lines %q, want one", access)
			}
			want := " response_id=" + m[1] + " response_status=completed input_items=1 output_items="
			if got := strings.Contains(access[0], want); got != tc.stored {
				t.Errorf("access line %q: carries %q = %t, want %t", access[0], want, got, tc.stored)
			}
		})
	}
}

// A commit the access line cannot carry logs its own line: one after the line was written, and
// a second one of the same request (the line carries one response).
func TestACommitTheAccessLineCannotCarryIsLoggedOnItsOwn(t *testing.T) {
	logs := &logRecords{}
	s := &Server{log: slog.New(logs)}
	ctx := withStoredLog(t.Context(), &storedLog{})
	s.logStored(ctx, "resp_1", wire.StatusCompleted, 1, 2, 3)
	s.logStored(ctx, "resp_2", wire.StatusFailed, 4, 5, 6)
	late := &storedLog{}
	if attrs := late.take(); attrs != nil {
		t.Fatalf("an unused access line carries %v", attrs)
	}
	s.logStored(withStoredLog(t.Context(), late), "resp_3", wire.StatusCancelled, 7, 8, 9)
	s.logStored(t.Context(), "resp_4", wire.StatusIncomplete, 0, 1, 0) // a background worker's
	want := []string{
		"INFO response stored response_id=resp_2 response_status=failed input_items=4 output_items=5 events=6",
		"INFO response stored response_id=resp_3 response_status=cancelled input_items=7 output_items=8 events=9",
		"INFO response stored response_id=resp_4 response_status=incomplete input_items=0 output_items=1 events=0",
	}
	if got := logs.snapshot(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
