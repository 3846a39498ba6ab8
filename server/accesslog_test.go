package server

import (
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/respgate/respgate/internal/logtest"
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
			logs := &logtest.Records{}
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
			for _, l := range logs.Snapshot() {
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
