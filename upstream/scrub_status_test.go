package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The statuses whose mapping does not depend on the body (429, 502, 503, 504) still relay vLLM's
// message, so it is scrubbed as every relayed message is: the upstream's URL, host and key, any
// other URL, absolute file paths and control characters never reach the client (docs/errors.md).
func TestRelayedMessagesOfStatusOnlyRowsAreScrubbed(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			var base string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				msg := "engine at " + base + "/v1/responses (" + strings.TrimPrefix(base, "http://") + ", key " + testKey +
					") failed; see http://10.1.2.3:9000/internal/metrics and /opt/vllm/lib/python3.12/site-packages/vllm/engine.py\x1b[0m"
				m, _ := json.Marshal(msg)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = fmt.Fprintf(w, `{"error":{"message":%s,"type":"ServiceUnavailableError","code":%d}}`, m, status)
			}))
			t.Cleanup(srv.Close)
			base = srv.URL
			_, err := newTestClient(t, base, nil).Create(t.Context(), []byte(`{}`))
			e := mustKind(t, err, KindHTTP)
			ae := e.APIError()
			if ae.Status != status {
				t.Fatalf("status %d, want %d", ae.Status, status)
			}
			msg := ae.Message
			for _, leak := range []string{"10.1.2.3", "/internal/metrics", "/opt/vllm", "site-packages", "\x1b"} {
				if strings.Contains(msg, leak) {
					t.Errorf("message keeps %q: %q", leak, msg)
				}
			}
			if !strings.Contains(msg, "[url]") || !strings.Contains(msg, "[path]") || !strings.HasPrefix(msg, "engine at [upstream]") {
				t.Errorf("message not scrubbed as documented: %q", msg)
			}
			assertNoSecrets(t, "message", msg, base)
			assertNoSecrets(t, "Error()", err.Error(), base)
		})
	}
}
