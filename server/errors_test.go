package server

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// TestErrorHandlerWritesTheUpstreamRetryAfter: the envelope of an upstream failure goes out with
// the upstream's Retry-After; without one a 429 or 503 still says when to retry, and other
// statuses send none.
func TestErrorHandlerWritesTheUpstreamRetryAfter(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e := echo.New()
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"an upstream 429 keeps its Retry-After",
			fmt.Errorf("turn: %w", &upstream.Error{Kind: upstream.KindHTTP, Status: 429, Message: "slow down", RetryAfter: "7"}),
			429, wire.CodeRateLimit, "7"},
		{"an upstream 503 keeps its Retry-After",
			&upstream.Error{Kind: upstream.KindHTTP, Status: 503, Message: "loading", RetryAfter: "Wed, 21 Oct 2026 07:28:00 GMT"},
			503, "upstream_unavailable", "Wed, 21 Oct 2026 07:28:00 GMT"},
		{"an upstream 504 page keeps its Retry-After",
			&upstream.Error{Kind: upstream.KindBadBody, Status: 504, RetryAfter: "5"},
			504, "upstream_unavailable", "5"},
		{"an upstream 429 without one gets the default",
			&upstream.Error{Kind: upstream.KindHTTP, Status: 429, Message: "slow down"},
			429, wire.CodeRateLimit, "1"},
		{"the gateway's own 503 gets the default",
			&wire.APIError{Status: 503, Type: wire.ErrServer, Code: "too_many_streams", Message: "busy"},
			503, "too_many_streams", "1"},
		{"a 400 sends none",
			&upstream.Error{Kind: upstream.KindHTTP, Status: 400, Message: "bad", RetryAfter: "7"},
			400, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(http.MethodPost, "/v1/responses", nil), rec)
			s.errorHandler(tc.err, c)
			var env struct {
				Error struct {
					Code *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			code := ""
			if env.Error.Code != nil {
				code = *env.Error.Code
			}
			if rec.Code != tc.status || code != tc.code || rec.Header().Get("Retry-After") != tc.retryAfter {
				t.Errorf("got %d code %q Retry-After %q, want %d %q %q",
					rec.Code, code, rec.Header().Get("Retry-After"), tc.status, tc.code, tc.retryAfter)
			}
		})
	}
}
