package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/respgate/respgate/internal/testnet"
	"github.com/respgate/respgate/wire"
)

func jsonServer(t testing.TB, status int, contentType, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRequest checks what goes on the wire: method, path, body as given, headers.
func TestRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path, auth, ctype, accept, body string
	}
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), r.Header.Get("Accept"), string(b)}
		if r.Header.Get("Accept") == "text/event-stream" {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			_, _ = io.WriteString(w, "data: "+created+"\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, nil)
	body := []byte(`{"model":"m","stream":false,"input":"hi"}`)

	raw, err := c.Create(t.Context(), body)
	if err != nil || string(raw) != `{"object":"list","data":[]}` {
		t.Fatalf("Create = %s, %v", raw, err)
	}
	want := seen{"POST", "/v1/responses", "Bearer " + testKey, "application/json", "application/json", string(body)}
	if s := <-got; s != want {
		t.Errorf("Create sent %+v, want %+v", s, want)
	}

	s, err := c.Stream(t.Context(), []byte(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if o := drain(t, s); len(o.Events) != 1 || o.End != "eof" {
		t.Errorf("stream: %+v", o)
	}
	want = seen{"POST", "/v1/responses", "Bearer " + testKey, "application/json", "text/event-stream", `{"stream":true}`}
	if s := <-got; s != want {
		t.Errorf("Stream sent %+v, want %+v", s, want)
	}

	if _, err := c.Models(t.Context()); err != nil {
		t.Fatal(err)
	}
	want = seen{"GET", "/v1/models", "Bearer " + testKey, "", "application/json", ""}
	if s := <-got; s != want {
		t.Errorf("Models sent %+v, want %+v", s, want)
	}

	// /tokenize is at the server's root, beside /v1 (vLLM's route).
	if _, err := c.Tokenize(t.Context(), []byte(`{"prompt":"a b"}`)); err != nil {
		t.Fatal(err)
	}
	want = seen{"POST", "/tokenize", "Bearer " + testKey, "application/json", "application/json", `{"prompt":"a b"}`}
	if s := <-got; s != want {
		t.Errorf("Tokenize sent %+v, want %+v", s, want)
	}
}

func TestNoAPIKeySendsNoAuthorization(t *testing.T) {
	t.Parallel()
	auth := make(chan []string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Values("Authorization")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, func(cfg *Config) { cfg.APIKey = "" })
	if _, err := c.Models(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a := <-auth; len(a) != 0 {
		t.Errorf("Authorization sent without a key: %q", a)
	}
}

type errorCase struct {
	name   string
	call   string // create, stream, models
	server func(t *testing.T) string
	mod    func(*Config)
	body   string // the request body; "" sends {"stream":false} or {"stream":true}
	kind   Kind
	status int
	// fields of the *Error for KindHTTP
	typ, code, param, msg string
	// the client-facing envelope
	api wire.APIError
}

func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr
}

func served(status int, ctype, body string) func(t *testing.T) string {
	return func(t *testing.T) string { return jsonServer(t, status, ctype, body).URL }
}

var errorCases = []errorCase{
	{
		name: "connection refused is unreachable", call: "stream", server: closedPort,
		kind: KindUnreachable,
		api:  wire.APIError{Status: 502, Type: "server_error", Code: "upstream_unreachable", Message: "The upstream model server could not be reached."},
	},
	{
		name: "an unknown host is unreachable", call: "create",
		server: func(*testing.T) string { return "http://respgate-no-such-host.invalid" },
		kind:   KindUnreachable,
		api:    wire.APIError{Status: 502, Type: "server_error", Code: "upstream_unreachable", Message: "The upstream model server could not be reached."},
	},
	{
		name: "vLLM's unknown model 404 without a param is model_not_found", call: "stream",
		server: served(404, "application/json", `{"error":{"message":"The model `+"`gpt-x`"+` does not exist.","type":"NotFoundError","param":null,"code":404}}`),
		kind:   KindHTTP, status: 404, typ: "NotFoundError", code: "404", msg: "The model `gpt-x` does not exist.",
		api: wire.APIError{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model", Message: "The model `gpt-x` does not exist."},
	},
	{
		name: "vLLM 400 with a string code and a param", call: "create",
		server: func(t *testing.T) string {
			return jsonServer(t, 400, "application/json", `{"error":{"message":"bad temperature","type":"BadRequestError","param":"temperature","code":"invalid_value"}}`).URL
		},
		kind: KindHTTP, status: 400, typ: "BadRequestError", code: "invalid_value", param: "temperature", msg: "bad temperature",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_value", Param: "temperature", Message: "bad temperature"},
	},
	{
		name: "a 429 is rate_limit_exceeded whatever type it came with", call: "create",
		server: served(429, "application/json", `{"error":{"message":"slow down","type":"rate_limit_error","code":null}}`),
		kind:   KindHTTP, status: 429, typ: "rate_limit_error", msg: "slow down",
		api: wire.APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "slow down"},
	},
	{
		name: "the flat envelope of older vLLM", call: "create",
		server: served(400, "application/json", `{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}`),
		kind:   KindHTTP, status: 400, typ: "BadRequestError", code: "400", msg: "too long",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Message: "too long"},
	},
	{
		name: "vLLM 500 becomes 502 with its message, file paths removed", call: "stream",
		server: served(500, "application/json", `{"error":{"message":"CUDA out of memory at /opt/vllm/worker.py","type":"InternalServerError","param":null,"code":500}}`),
		kind:   KindHTTP, status: 500, typ: "InternalServerError", code: "500", msg: "CUDA out of memory at /opt/vllm/worker.py",
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "CUDA out of memory at [path]"},
	},
	{
		name: "a rejected upstream key is the gateway's problem", call: "models",
		server: served(401, "application/json", `{"error":"Unauthorized"}`),
		kind:   KindHTTP, status: 401, msg: "Unauthorized",
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "upstream rejected the gateway's credentials (status 401)"},
	},
	{
		name: "a non-JSON error page keeps only the status", call: "stream",
		server: served(502, "text/html", `<html><body>Bad Gateway from nginx at 10.0.0.7</body></html>`),
		kind:   KindBadBody, status: 502,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_unavailable", Message: "The upstream model server is unavailable (status 502); retry later."},
	},
	{
		name: "FastAPI's route-not-found is a bad body", call: "stream",
		server: served(404, "application/json", `{"detail":"Not Found"}`),
		kind:   KindBadBody, status: 404,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server sent an answer the gateway cannot read (status 404)."},
	},
	{
		name: "a redirect is not followed", call: "create",
		server: func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/responses" {
					t.Errorf("redirect followed to %s", r.URL.Path)
				}
				http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		},
		kind: KindBadBody, status: 307,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server sent an answer the gateway cannot read (status 307)."},
	},
	{
		name: "a stream answered as JSON is a bad body", call: "stream",
		server: served(200, "application/json", `{"id":"resp_1"}`),
		kind:   KindBadBody, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server sent an answer the gateway cannot read (status 200)."},
	},
	{
		name: "a non-JSON 2xx body is a bad body", call: "create",
		server: served(200, "application/json", `not json`),
		kind:   KindBadBody, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server sent an answer the gateway cannot read (status 200)."},
	},
	{
		name: "a 2xx body cut inside its object is a bad body", call: "create",
		server: served(200, "application/json", `{"id":"resp_1","output":[`),
		kind:   KindBadBody, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server sent an answer the gateway cannot read (status 200)."},
	},
	{
		name: "a 2xx JSON array is a bad body", call: "models",
		server: served(200, "application/json", `[1,2]`),
		kind:   KindBadBody, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server sent an answer the gateway cannot read (status 200)."},
	},
	{
		name: "a non-stream body over the limit", call: "create",
		server: served(200, "application/json", `{"pad":"`+strings.Repeat("x", 4096)+`"}`),
		mod:    func(c *Config) { c.MaxEventBytes = 1024 },
		kind:   KindEventTooLarge, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server's answer exceeds the gateway's size limit."},
	},
	{
		name: "a non-stream body over the limit without Content-Length", call: "create",
		server: func(t *testing.T) string { return sseServer(t, `{"pad":"`, strings.Repeat("x", 4096), `"}`).URL },
		mod:    func(c *Config) { c.MaxEventBytes = 1024 },
		kind:   KindEventTooLarge, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The upstream model server's answer exceeds the gateway's size limit."},
	},
	{
		name: "a connection closed before the headers is broken", call: "stream",
		server: func(t *testing.T) string { return rawServer(t, func(net.Conn, *bufio.ReadWriter) {}).URL },
		kind:   KindStreamBroken,
		api:    wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The connection to the upstream model server broke before the response was complete."},
	},
	{
		name: "a malformed response is broken, and its bytes stay out of the message", call: "create",
		server: func(t *testing.T) string {
			return rawServer(t, func(_ net.Conn, rw *bufio.ReadWriter) { _, _ = rw.WriteString("SECRET-GARBAGE\r\n\r\n") }).URL
		},
		kind: KindStreamBroken,
		api:  wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The connection to the upstream model server broke before the response was complete."},
	},
	{
		name: "a stream cut mid-chunk is broken", call: "stream",
		server: func(t *testing.T) string {
			return rawServer(t, func(_ net.Conn, rw *bufio.ReadWriter) {
				_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				ev := "event: response.created\ndata: " + created + "\n\n"
				_, _ = fmt.Fprintf(rw, "%x\r\n%s\r\n", len(ev), ev)
				_, _ = fmt.Fprintf(rw, "%x\r\nevent: response.compl", 200) // chunk announced, cut short
			}).URL
		},
		kind: KindStreamBroken, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The connection to the upstream model server broke before the response was complete."},
	},
	{
		name: "a stream cut short of its Content-Length is broken", call: "stream",
		server: func(t *testing.T) string {
			return rawServer(t, func(_ net.Conn, rw *bufio.ReadWriter) {
				_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 500\r\n\r\n")
				_, _ = rw.WriteString("event: response.created\ndata: " + created + "\n\nevent: response.completed\ndata: {\"ty")
			}).URL
		},
		kind: KindStreamBroken, status: 200,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The connection to the upstream model server broke before the response was complete."},
	},
	{
		name: "an error body cut short is broken but keeps its status", call: "create",
		server: func(t *testing.T) string {
			return rawServer(t, func(_ net.Conn, rw *bufio.ReadWriter) {
				_, _ = rw.WriteString("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"error\":")
			}).URL
		},
		kind: KindStreamBroken, status: 400,
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "The connection to the upstream model server broke before the response was complete."},
	},
}

func runCall(ctx context.Context, c *Client, call string) error {
	return runCallBody(ctx, c, call, "")
}

func runCallBody(ctx context.Context, c *Client, call, body string) error {
	switch call {
	case "create":
		if body == "" {
			body = `{"stream":false}`
		}
		_, err := c.Create(ctx, []byte(body))
		return err
	case "models":
		_, err := c.Models(ctx)
		return err
	}
	if body == "" {
		body = `{"stream":true}`
	}
	s, err := c.Stream(ctx, []byte(body))
	if err != nil {
		return err
	}
	defer s.Close()
	for _, err := range s.Events() {
		if err != nil {
			return err
		}
	}
	panic("Events ended without its final error")
}

// TestErrorKinds checks each failure's classification, its fields and its client envelope, and
// that neither the key nor the upstream address leaks into any rendering of the error.
func TestErrorKinds(t *testing.T) {
	t.Parallel()
	runErrorCases(t, errorCases)
}

func runErrorCases(t *testing.T, cases []errorCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := tc.server(t)
			c := newTestClient(t, base, func(cfg *Config) {
				cfg.ConnectTimeout = 5 * time.Second
				if tc.mod != nil {
					tc.mod(cfg)
				}
			})
			err := runCallBody(t.Context(), c, tc.call, tc.body)
			e := mustKind(t, err, tc.kind)
			if e.Status != tc.status {
				t.Errorf("Status = %d, want %d", e.Status, tc.status)
			}
			if tc.kind == KindHTTP {
				if e.Type != tc.typ || e.Code != tc.code || e.Param != tc.param || e.Message != tc.msg {
					t.Errorf("fields = %q %q %q %q, want %q %q %q %q", e.Type, e.Code, e.Param, e.Message, tc.typ, tc.code, tc.param, tc.msg)
				}
			}
			if got := *e.APIError(); got != tc.api {
				t.Errorf("APIError = %+v\n          want %+v", got, tc.api)
			}
			for what, s := range map[string]string{
				"Error()": e.Error(), "%+v": fmt.Sprintf("%+v", err), "%#v": fmt.Sprintf("%#v", err),
				"envelope": string(e.APIError().Envelope()), "slog": logged(err),
			} {
				assertNoSecrets(t, what, s, base)
				if strings.Contains(s, "SECRET-GARBAGE") || strings.Contains(s, "nginx") {
					t.Errorf("%s repeats upstream body bytes: %s", what, s)
				}
			}
			if IsClientGone(err) {
				t.Error("IsClientGone is true for an upstream failure")
			}
		})
	}
}

func logged(v any) string {
	var b bytes.Buffer
	slog.New(slog.NewJSONHandler(&b, nil)).Error("upstream failed", "error", v)
	return b.String()
}

// TestMessageSanitising: vLLM's message is cut to 1 KiB at a rune boundary and loses the
// upstream URL, host and key.
func TestMessageSanitising(t *testing.T) {
	t.Parallel()
	var base string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg := "failed calling " + base + "/v1/responses on " + strings.TrimPrefix(base, "http://") +
			" with key " + testKey + " \x00\x1b[31m " + strings.Repeat("é", 2000)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		m, _ := json.Marshal(msg)
		_, _ = fmt.Fprintf(w, `{"error":{"message":%s,"type":"BadRequestError","code":400}}`, m)
	}))
	t.Cleanup(srv.Close)
	base = srv.URL
	c := newTestClient(t, base, nil)
	_, err := c.Create(t.Context(), []byte(`{}`))
	e := mustKind(t, err, KindHTTP)
	msg := e.APIError().Message
	if len(msg) > 1024 || !strings.HasPrefix(msg, "failed calling [upstream]/responses on [upstream] with key [upstream]") {
		t.Errorf("message not sanitised (%d bytes): %.200s", len(msg), msg)
	}
	if strings.ContainsAny(msg, "\x00\x1b") || !strings.HasSuffix(msg, "é") {
		t.Errorf("control characters or a split rune survived: %q", msg[len(msg)-10:])
	}
	assertNoSecrets(t, "message", msg, base)
	assertNoSecrets(t, "Error()", err.Error(), base)
}

// TestSecretsNeverPrinted: Config, Client and Stream print a redacted summary through every
// route (String, %v, %+v, %#v, slog).
func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	cfg := Config{BaseURL: "http://user:pw-SECRET@vllm.internal:8000/v1", APIKey: testKey}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	s := memStream(c, strings.NewReader("data: "+created+"\n\n"))
	defer s.Close()
	if _, err := pull(t, s)(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{cfg, &cfg, c, s} {
		for _, out := range []string{fmt.Sprint(v), fmt.Sprintf("%+v", v), fmt.Sprintf("%#v", v), logged(v)} {
			if strings.Contains(out, testKey) || strings.Contains(out, "pw-SECRET") || strings.Contains(out, "response.created") {
				t.Errorf("%T printed a secret or event data: %s", v, out)
			}
		}
	}
	if !strings.Contains(cfg.String(), "[redacted]") {
		t.Errorf("Config.String does not say the key is redacted: %s", cfg)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{BaseURL: ""},
		{BaseURL: "localhost:8000/v1"},
		{BaseURL: "ftp://user:pw-SECRET@host/v1"},
		{BaseURL: "http://host/v1?key=pw-SECRET"},
		{BaseURL: "http://host/v1", ConnectTimeout: -1},
		{BaseURL: "http://host/v1", MaxEventBytes: -1},
	} {
		c, err := New(cfg)
		if err == nil {
			c.CloseIdleConnections()
			t.Errorf("New(%s) succeeded", cfg)
			continue
		}
		if strings.Contains(err.Error(), "pw-SECRET") {
			t.Errorf("New error echoes the URL: %v", err)
		}
	}
	c, err := New(Config{BaseURL: "http://host:8000/v1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if c.responsesURL != "http://host:8000/v1/responses" || c.connectTimeout != DefaultConnectTimeout ||
		c.idleTimeout != DefaultIdleTimeout || c.maxEventBytes != DefaultMaxEventBytes {
		t.Errorf("defaults not applied: %s %s %s %d", c.responsesURL, c.connectTimeout, c.idleTimeout, c.maxEventBytes)
	}
}

// TestConnectTimeout: a server that reads the request and never answers gives KindTimeout from
// the connect timer, once ConnectTimeout has passed, for Stream and Models.
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := memServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}), func(cfg *Config) { cfg.ConnectTimeout = 200 * time.Millisecond })
		for _, call := range []string{"stream", "models"} {
			start := time.Now()
			err := runCall(t.Context(), c, call)
			e := mustKind(t, err, KindTimeout)
			// The message names the cause: the connect timer, not the idle timer, a caller's
			// deadline or a net timeout.
			if want := "no response headers within 200ms"; e.Message != want {
				t.Errorf("%s: message %q, want %q", call, e.Message, want)
			}
			// The bubble's clock moves only while everything waits: it moved by the timeout.
			if d := time.Since(start); d != 200*time.Millisecond {
				t.Errorf("%s: timed out after %s, want 200ms", call, d)
			}
			if api := e.APIError(); api.Status != 504 {
				t.Errorf("%s: APIError status %d, want 504", call, api.Status)
			}
			assertNoSecrets(t, "Error()", e.Error(), memBase)
		}
	})
}

// TestCreateWaitsPastConnectTimeout: vLLM sends a non-streamed answer's headers only after
// generating it, so Create's connect timeout ends once the request is written.
func TestCreateWaitsPastConnectTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := memServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(400 * time.Millisecond): // "generating", on the bubble's clock
				_, _ = io.WriteString(w, `{"id":"resp_1"}`)
			case <-r.Context().Done(): // the client gave up (the bubble ends once it returns)
			}
		}), func(cfg *Config) { cfg.ConnectTimeout = 100 * time.Millisecond })
		if raw, err := c.Create(t.Context(), []byte(`{}`)); err != nil || string(raw) != `{"id":"resp_1"}` {
			t.Fatalf("Create = %s, %v", raw, err)
		}
	})
}

// stallHandler sends headers and the given prefix, then waits for the request to be cancelled
// and reports that on gone.
func stallHandler(ctype, prefix string) (http.Handler, <-chan struct{}) {
	gone := make(chan struct{})
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		_, _ = io.WriteString(w, prefix)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			once.Do(func() { close(gone) })
		case <-time.After(10 * time.Second):
		}
	}), gone
}

// stallServer serves stallHandler over HTTP.
func stallServer(t *testing.T, ctype, prefix string) (*httptest.Server, <-chan struct{}) {
	h, gone := stallHandler(ctype, prefix)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, gone
}

// TestIdleTimeout: a stream that stalls mid-event fails with KindTimeout after IdleTimeout, and
// so does a non-stream body that stalls after its headers.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h, gone := stallHandler("text/event-stream", "event: response.created\ndata: "+created+"\n\nevent: response.output_text.delta\ndata: {\"ty")
			c := memServer(t, h, func(cfg *Config) { cfg.IdleTimeout = 200 * time.Millisecond })
			s, err := c.Stream(t.Context(), []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			next := pull(t, s)
			if ev, err := next(); err != nil || ev.Type != "response.created" {
				t.Fatalf("first event: %v %v", ev, err)
			}
			start := time.Now()
			_, err = next()
			e := mustKind(t, err, KindTimeout)
			// The idle timer, not the connect timer (which stopped at the headers): its message,
			// after exactly IdleTimeout on the bubble's clock.
			if d := time.Since(start); d != 200*time.Millisecond {
				t.Errorf("idle timeout after %s, want 200ms", d)
			}
			if e.APIError().Status != 504 || e.Message != "no bytes for 200ms" {
				t.Errorf("error %v maps to %+v", e, e.APIError())
			}
			// A hang guard on the fake clock: it fires only if the server never sees the cancel.
			waitOrTimeout(t, gone, time.Second, "the server to see the request cancelled")
		})
	})
	t.Run("create body", func(t *testing.T) {
		t.Parallel()
		srv, gone := stallServer(t, "application/json", `{"id":"resp_1","output":[`)
		c := newTestClient(t, srv.URL, func(cfg *Config) { cfg.IdleTimeout = 200 * time.Millisecond })
		_, err := c.Create(t.Context(), []byte(`{}`))
		mustKind(t, err, KindTimeout)
		waitOrTimeout(t, gone, time.Second, "the server to see the request cancelled")
	})
}

// TestIdleTimeoutIgnoresCallerTime: time the caller spends in the body of its Events loop is not
// upstream silence.
func TestIdleTimeoutIgnoresCallerTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := memServer(t, sseHandler("data: "+created+"\n\n", "data: "+delta+"\n\n", "data: "+completed+"\n\n"),
			func(cfg *Config) { cfg.IdleTimeout = 100 * time.Millisecond })
		s, err := c.Stream(t.Context(), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		i := 0
		for _, err := range s.Events() {
			if i == 3 {
				if err != io.EOF {
					t.Fatalf("end = %v, want io.EOF", err)
				}
				break
			}
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			i++
			time.Sleep(250 * time.Millisecond) // a slow client, on the bubble's clock
		}
		if i != 3 {
			t.Fatalf("%d events, want 3", i)
		}
	})
}

// readInBackground ranges over s.Events on a goroutine of its own and sends the types of the
// events it read, then the error that ended the stream.
func readInBackground(s *Stream) <-chan readResult {
	done := make(chan readResult, 1)
	go func() {
		var r readResult
		for ev, err := range s.Events() {
			if err != nil {
				r.err = err
				break
			}
			r.types = append(r.types, string(ev.Type))
		}
		done <- r
	}()
	return done
}

type readResult struct {
	types []string
	err   error
}

// TestCancelUnblocksARead: cancelling the caller's context ends a read of Events blocked on the
// body promptly with KindCanceled, and the upstream sees its request cancelled.
func TestCancelUnblocksARead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, gone := stallHandler("text/event-stream", "event: response.created\ndata: "+created+"\n\n")
		c := memServer(t, h, nil)
		ctx, cancel := context.WithCancel(t.Context())
		s, err := c.Stream(ctx, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		done := readInBackground(s)
		synctest.Wait() // the reader has the first event and is blocked reading the body
		cancel()
		r := <-done
		if len(r.types) != 1 || r.types[0] != "response.created" {
			t.Errorf("events before the cancel %v, want the first one", r.types)
		}
		e := mustKind(t, r.err, KindCanceled)
		if !IsClientGone(r.err) || !errors.Is(r.err, context.Canceled) {
			t.Errorf("IsClientGone=%v errors.Is(Canceled)=%v", IsClientGone(r.err), errors.Is(r.err, context.Canceled))
		}
		if e.APIError().Status != 499 {
			t.Errorf("APIError status %d, want 499", e.APIError().Status)
		}
		// A hang guard on the fake clock: it fires only if the server never sees the cancel.
		waitOrTimeout(t, gone, time.Second, "the server to see the request cancelled")
	})
}

// TestCancelCauseIsKept: a caller that cancels with a cause finds both the cause and
// context.Canceled in the error.
func TestCancelCauseIsKept(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, gone := stallHandler("text/event-stream", ": hi\n\n")
		c := memServer(t, h, nil)
		ctx, cancel := context.WithCancelCause(t.Context())
		s, err := c.Stream(ctx, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		done := readInBackground(s)
		synctest.Wait() // the reader is blocked reading the body
		shutdown := errors.New("gateway shutting down")
		cancel(shutdown)
		r := <-done
		e := mustKind(t, r.err, KindCanceled)
		if !errors.Is(r.err, shutdown) || !errors.Is(r.err, context.Canceled) || e.Status != 200 {
			t.Errorf("error %v: Is(cause)=%v Is(Canceled)=%v status=%d", r.err, errors.Is(r.err, shutdown), errors.Is(r.err, context.Canceled), e.Status)
		}
		waitOrTimeout(t, gone, time.Second, "the server to see the request cancelled")
	})
}

// TestCancelledContext: a context cancelled (or past its deadline) before the call sends nothing.
func TestCancelledContext(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, call := range []string{"create", "stream", "models"} {
		if err := runCall(ctx, c, call); !IsClientGone(err) {
			t.Errorf("%s: %v, want KindCanceled", call, err)
		}
	}
	dctx, dcancel := context.WithTimeout(t.Context(), -time.Second)
	defer dcancel()
	mustKind(t, runCall(dctx, c, "create"), KindTimeout)
	if hits.Load() != 0 {
		t.Errorf("%d requests reached the server", hits.Load())
	}
}

// TestCallerDeadlineDuringCreate: the caller's deadline while waiting for an answer is a
// timeout (504), not a client that left.
func TestCallerDeadlineDuringCreate(t *testing.T) {
	t.Parallel()
	base := testnet.SilentServer(t)
	c := newTestClient(t, base, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Create(ctx, []byte(`{}`))
	if e := mustKind(t, err, KindTimeout); e.APIError().Status != 504 || IsClientGone(err) {
		t.Errorf("error %v maps to %+v", e, e.APIError())
	}
}

// TestCloseUnblocksARead: Close from another goroutine ends a read of Events blocked on the body
// with ErrClosed, and releases the connection (the server sees its request cancelled).
func TestCloseUnblocksARead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, gone := stallHandler("text/event-stream", ": hello\n\n")
		c := memServer(t, h, nil)
		s, err := c.Stream(t.Context(), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		done := readInBackground(s)
		synctest.Wait() // the reader is blocked reading the body
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if r := <-done; len(r.types) != 0 || !errors.Is(r.err, ErrClosed) {
			t.Errorf("Events = %v then %v, want no event and ErrClosed", r.types, r.err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
		// A hang guard on the fake clock: it fires only if the server never sees the close.
		waitOrTimeout(t, gone, time.Second, "the server to see the connection closed")
	})
}

// TestConnectionReuse: a stream read to its end returns its connection to the pool, so
// sequential streams share one connection; a stream closed early does not poison the pool.
func TestConnectionReuse(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			_, _ = io.WriteString(w, "data: "+delta+"\n\n")
			_ = http.NewResponseController(w).Flush()
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, nil)
	for range 5 {
		s, err := c.Stream(t.Context(), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if o := drain(t, s); len(o.Events) != 3 || o.End != "eof" {
			t.Fatalf("stream: %+v", o)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 5 sequential streams read to their end, want 1", n)
	}
	s, err := c.Stream(t.Context(), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pull(t, s)(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // early: this connection is dropped
	if o := runCall(t.Context(), c, "stream"); o != io.EOF {
		t.Errorf("stream after an early Close: %v", o)
	}
}

// TestConcurrentStreams runs many streams at once over one Client (under -race in CI).
func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("event: response.output_text.delta\ndata: "+delta+"\n\n", 50)
	srv := sseServer(t, body[:len(body)/2], body[len(body)/2:])
	c := newTestClient(t, srv.URL, nil)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			s, err := c.Stream(t.Context(), []byte(`{}`))
			if err != nil {
				t.Error(err)
				return
			}
			if o := drain(t, s); len(o.Events) != 50 || o.End != "eof" {
				t.Errorf("stream: %d events, end %s", len(o.Events), o.End)
			}
		})
	}
	wg.Wait()
}

// TestCloseWithoutReading: a stream closed before it is read releases everything, and Events
// then yields only ErrClosed.
func TestCloseWithoutReading(t *testing.T) {
	t.Parallel()
	srv, gone := stallServer(t, "text/event-stream", ": hi\n\n")
	c := newTestClient(t, srv.URL, nil)
	s, err := c.Stream(t.Context(), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if o := drain(t, s); len(o.Events) != 0 || o.End != "closed" {
		t.Errorf("Events after Close = %+v, want no event and closed", o)
	}
	waitOrTimeout(t, gone, time.Second, "the server to see the connection closed")
}

// TestAbandonedStreamIsReleased: a stream whose caller stops reading without Close is released
// as soon as its context ends (TestMain's goleak would also catch the iterator).
func TestAbandonedStreamIsReleased(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, gone := stallHandler("text/event-stream", "event: response.created\ndata: "+created+"\n\n")
		c := memServer(t, h, nil)
		ctx, cancel := context.WithCancel(t.Context())
		s, err := c.Stream(ctx, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close() // only for a failed test: the bubble must end with nothing blocked
		next := pull(t, s)
		if _, err := next(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cancel()
		// A hang guard on the fake clock: it fires only if the server never sees the cancel.
		waitOrTimeout(t, gone, time.Second, "the server to see the request cancelled")
		synctest.Wait() // every goroutine the cancel set off has finished or is blocked for good
		s.mu.Lock()
		released := s.released
		s.mu.Unlock()
		if !released || time.Since(start) != 0 {
			t.Fatalf("released=%v %s after the context ended, want released with no time passing", released, time.Since(start))
		}
		if _, err := next(); !IsClientGone(err) {
			t.Errorf("Events after the context ended = %v, want KindCanceled", err)
		}
	})
}
