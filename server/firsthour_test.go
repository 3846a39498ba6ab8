package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A request with no key (or a header that is not Bearer) is told what is missing, and the
// envelope shows 'Bearer <key>' as written, not \u003ckey\u003e.
func TestMissingKeySaysSoInPlainText(t *testing.T) {
	s := newSimServer(t, Config{APIKeys: []string{"sk-good"}}, nil)
	for header, want := range map[string]string{
		"":              "No API key provided. Send it as 'Authorization: Bearer <key>'.",
		"Basic abc":     "The Authorization header is not 'Bearer <key>'.",
		"Bearer sk-bad": "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
	} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/models", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Code != http.StatusUnauthorized || !strings.Contains(body, `"message":"`+want+`"`) || !strings.Contains(body, `"code":"invalid_api_key"`) {
			t.Errorf("Authorization %q: %d %s", header, rec.Code, body)
		}
		if strings.Contains(body, `\u003c`) {
			t.Errorf("escaped angle brackets: %s", body)
		}
	}
}

// A path without /v1 (a base URL without it) gets a 404 envelope that says where the API is.
func TestUnknownPathWithoutV1HintsAtV1(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	code, body := call(t, s, http.MethodPost, "/responses", `{}`)
	if code != http.StatusNotFound || !strings.Contains(body, "did you mean /v1/responses?") || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("POST /responses: %d %s", code, body)
	}
	code, body = call(t, s, http.MethodGet, "/v1/nothing", "")
	if code != http.StatusNotFound || strings.Contains(body, "did you mean") {
		t.Errorf("GET /v1/nothing: %d %s", code, body)
	}
}
