package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// decodeEnvelope checks that body is exactly the OpenAI error envelope and returns it.
func decodeEnvelope(t *testing.T, contentType string, body []byte) wire.ErrorBody {
	t.Helper()
	var env struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if !strings.HasPrefix(contentType, "application/json") || dec.Decode(&env) != nil || env.Error == nil || env.Error.Message == "" || env.Error.Type == "" {
		t.Fatalf("not the JSON envelope (%s): %q", contentType, body)
	}
	return wire.ErrorBody{Message: env.Error.Message, Type: env.Error.Type, Param: env.Error.Param, Code: env.Error.Code}
}

// A request net/http cannot parse (a malformed %-escape in the path, a header line without a
// colon) is answered with the envelope, with net/http's status, over a real connection.
func TestRequestsNetHTTPRefusesGetTheEnvelope(t *testing.T) {
	s, calls := newIntakeServer(t, Config{})
	hs := httptest.NewUnstartedServer(s)
	hs.Listener = Listener(hs.Listener)
	hs.Start()
	t.Cleanup(hs.Close)
	for _, raw := range []string{
		"GET /v1/responses/%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/responses/resp_1%2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/responses/%G0/cancel HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufioReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = conn.Close()
		env := decodeEnvelope(t, resp.Header.Get("Content-Type"), body)
		if resp.StatusCode != http.StatusBadRequest || env.Type != wire.ErrInvalidRequest || env.Code != nil || env.Param != nil ||
			resp.ContentLength != int64(len(body)) {
			t.Fatalf("%q: %d %q", raw, resp.StatusCode, body)
		}
	}
	// A well-formed request on the wrapped listener is served as before.
	resp, err := http.Get(hs.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("healthz: %d %s", resp.StatusCode, body)
	}
	if calls.Load() != 0 {
		t.Fatal("a refused request reached the upstream")
	}
}

// A WebSocket handshake the library refuses (another origin: 403; an unsupported version or a
// bad key: 400) is answered with the envelope, not the library's text/plain.
func TestWebSocketHandshakeRefusalsAreEnvelopes(t *testing.T) {
	s, _ := newIntakeServer(t, Config{})
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	for _, tc := range []struct {
		name, origin, version, key string
		status                     int
		code                       string
	}{
		{"another origin", "http://evil.example", "13", "dGhlIHNhbXBsZSBub25jZQ==", http.StatusForbidden, "websocket_origin_not_allowed"},
		{"version 12", "", "12", "dGhlIHNhbXBsZSBub25jZQ==", http.StatusBadRequest, "invalid_websocket_handshake"},
		{"a short key", "", "13", "c2hvcnQ=", http.StatusBadRequest, "invalid_websocket_handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/v1/responses", nil)
			req.Header.Set("Authorization", "Bearer k")
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", tc.version)
			req.Header.Set("Sec-WebSocket-Key", tc.key)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			env := decodeEnvelope(t, resp.Header.Get("Content-Type"), body)
			if resp.StatusCode != tc.status || deref(env.Code) != tc.code || env.Type != wire.ErrInvalidRequest {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if strings.Contains(resp.Header.Get("Content-Type"), "text/plain") || strings.Contains(string(body), "\n{") {
				t.Fatalf("the library's text leaked into the answer: %q", body)
			}
		})
	}
}

// Two Authorization headers are refused, whichever of them is valid; one is served.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	s, _ := newIntakeServer(t, Config{APIKeys: []string{"good"}})
	for _, keys := range [][]string{{"Bearer good", "Bearer other"}, {"Bearer other", "Bearer good"}, {"Bearer good", "Bearer good"}} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/models", nil)
		for _, k := range keys {
			req.Header.Add("Authorization", k)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		env := decodeEnvelope(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
		if rec.Code != http.StatusUnauthorized || deref(env.Code) != "invalid_api_key" || !strings.Contains(env.Message, "more than one Authorization") {
			t.Fatalf("%v: %d %s", keys, rec.Code, rec.Body)
		}
	}
}

// A route's path with a method it does not serve is 405 method_not_allowed with Allow, as
// docs/errors.md says; an unknown path stays 404.
func TestWrongMethodIs405WithAllow(t *testing.T) {
	s, calls := newIntakeServer(t, Config{})
	for _, tc := range []struct {
		method, path string
		status       int
		allow        []string
	}{
		{http.MethodDelete, "/v1/models", 405, []string{"GET"}},
		{http.MethodPut, "/v1/responses", 405, []string{"POST", "GET"}},
		{http.MethodPatch, "/v1/conversations/conv_1", 405, []string{"GET", "POST", "DELETE"}},
		{http.MethodPut, "/v1/conversations/conv_1/items/msg_1", 405, []string{"GET", "DELETE"}},
		{http.MethodGet, "/v1/chat/completions", 405, []string{"POST"}},
		{http.MethodGet, "/v1/responses/resp_1/cancel", 405, []string{"POST"}},
		{http.MethodGet, "/v1/nothing", 404, nil},
		{http.MethodPost, "/v1/responses/resp_1/input_items/x", 404, nil},
		{http.MethodPost, "/healthz", 405, []string{"GET"}},
	} {
		rec, env := do(t, s, tc.method, tc.path, "")
		want := "not_found"
		if tc.status == 405 {
			want = "method_not_allowed"
		}
		if rec.Code != tc.status || deref(env.Code) != want || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
		}
		allow := rec.Header().Get("Allow")
		for _, m := range tc.allow {
			if !strings.Contains(allow, m) {
				t.Fatalf("%s %s: Allow %q lacks %s", tc.method, tc.path, allow, m)
			}
		}
		if len(strings.Split(allow, ", ")) != len(tc.allow) && tc.allow != nil {
			t.Fatalf("%s %s: Allow %q, want %v", tc.method, tc.path, allow, tc.allow)
		}
	}
	if calls.Load() != 0 {
		t.Fatal("a refused request reached the upstream")
	}
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
