package upstream

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/testnet"
	"github.com/respgate/respgate/upstream/vllmsim"
	"github.com/respgate/respgate/wire"
)

// simServer serves the vLLM simulator, whose error answers are vLLM's own (status, type, integer
// code, param) and whose faults choose the status and Retry-After per request.
func simServer(opts vllmsim.Options) func(t *testing.T) string {
	return func(t *testing.T) string {
		srv := httptest.NewServer(vllmsim.New(opts))
		t.Cleanup(srv.Close)
		return srv.URL
	}
}

// servedWith is served with response headers, given as name, value pairs.
func servedWith(status int, ctype, body string, header ...string) func(t *testing.T) string {
	return func(t *testing.T) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
}

const harmonyModel = vllmsim.HarmonyModel

func simBody(model string, stream bool, extra string) string {
	s := "false"
	if stream {
		s = "true"
	}
	return `{"model":"` + model + `","input":"hi","stream":` + s + extra + `}`
}

// mappingCases is the table of docs/errors.md, one row per upstream answer, each against the
// simulator where it can produce that answer and against a hand-written server speaking vLLM's
// (or a proxy's) shape otherwise.
var mappingCases = []errorCase{
	// 429: rate_limit_exceeded, vLLM's message, Retry-After kept.
	{
		name: "simulated 429 with Retry-After, streamed", call: "stream",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel+"?status=429&retry_after=7", true, ""),
		kind:   KindHTTP, status: 429, typ: "Too Many Requests", code: "429", msg: "Simulated error (status 429).",
		api: wire.APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "Simulated error (status 429).", RetryAfter: "7"},
	},
	{
		name: "simulated 429 with Retry-After, not streamed", call: "create",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel+"?status=429&retry_after=7", false, ""),
		kind:   KindHTTP, status: 429, typ: "Too Many Requests", code: "429", msg: "Simulated error (status 429).",
		api: wire.APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "Simulated error (status 429).", RetryAfter: "7"},
	},
	{
		name: "429 in vLLM's older flat envelope with an HTTP-date Retry-After", call: "create",
		server: servedWith(429, "application/json", `{"object":"error","message":"queue full","type":"TooManyRequests","param":null,"code":429}`,
			"Retry-After", "Wed, 21 Oct 2026 07:28:00 GMT"),
		kind: KindHTTP, status: 429, typ: "TooManyRequests", code: "429", msg: "queue full",
		api: wire.APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "queue full", RetryAfter: "Wed, 21 Oct 2026 07:28:00 GMT"},
	},
	{
		name: "a proxy's HTML 429 is rate_limit_exceeded too, and a malformed Retry-After is dropped", call: "stream",
		server: servedWith(429, "text/html", `<html>429 Too Many Requests from nginx</html>`, "Retry-After", "soon\r\nX-Evil: 1"),
		kind:   KindBadBody, status: 429,
		api: wire.APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "The upstream model server is rate limiting requests; retry later."},
	},
	// 502, 503, 504: the same status, upstream_unavailable, Retry-After kept.
	{
		name: "simulated 503 with Retry-After", call: "create",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel+"?status=503&retry_after=30", false, ""),
		kind:   KindHTTP, status: 503, typ: "Service Unavailable", code: "503", msg: "Simulated error (status 503).",
		api: wire.APIError{Status: 503, Type: "server_error", Code: "upstream_unavailable", Message: "Simulated error (status 503).", RetryAfter: "30"},
	},
	{
		name: "simulated 503 without Retry-After", call: "stream",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel+"?status=503", true, ""),
		kind:   KindHTTP, status: 503, typ: "Service Unavailable", code: "503", msg: "Simulated error (status 503).",
		api: wire.APIError{Status: 503, Type: "server_error", Code: "upstream_unavailable", Message: "Simulated error (status 503)."},
	},
	{
		name: "simulated 502", call: "stream",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel+"?status=502", true, ""),
		kind:   KindHTTP, status: 502, typ: "Bad Gateway", code: "502", msg: "Simulated error (status 502).",
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_unavailable", Message: "Simulated error (status 502)."},
	},
	{
		name: "a proxy's 504 page keeps its status and Retry-After", call: "create",
		server: servedWith(504, "text/html", `<html>504 Gateway Time-out</html>`, "Retry-After", "5"),
		kind:   KindBadBody, status: 504,
		api: wire.APIError{Status: 504, Type: "server_error", Code: "upstream_unavailable",
			Message: "The upstream model server is unavailable (status 504); retry later.", RetryAfter: "5"},
	},
	// Other 5xx: 502 upstream_error with vLLM's message; Retry-After is not repeated.
	{
		name: "simulated 500", call: "create",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel+"?status=500&retry_after=3", false, ""),
		kind:   KindHTTP, status: 500, typ: "InternalServerError", code: "500", msg: "Simulated error (status 500).",
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "Simulated error (status 500)."},
	},
	{
		name: "a 500 message loses URLs and file paths", call: "create",
		server: servedWith(500, "application/json",
			`{"error":{"message":"EngineCore failed: see https://hub.example.com/x/y and /usr/lib/python3/vllm/engine.py:42 for openai/gpt-oss","type":"InternalServerError","param":null,"code":500}}`),
		kind: KindHTTP, status: 500, typ: "InternalServerError", code: "500",
		msg: "EngineCore failed: see https://hub.example.com/x/y and /usr/lib/python3/vllm/engine.py:42 for openai/gpt-oss",
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "EngineCore failed: see [url] and [path]:42 for openai/gpt-oss"},
	},
	{
		name: "a 501 about something else is an upstream error", call: "create",
		server: servedWith(501, "application/json", `{"error":{"message":"Not implemented yet","type":"NotImplementedError","param":null,"code":501}}`),
		kind:   KindHTTP, status: 501, typ: "NotImplementedError", code: "501", msg: "Not implemented yet",
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "Not implemented yet"},
	},
	// 400: vLLM's message, the client's param name, a string code or null.
	{
		name: "simulated 400 has a null code, not the number", call: "create",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel+"?status=400", false, ""),
		kind:   KindHTTP, status: 400, typ: "BadRequestError", code: "400", msg: "Simulated error (status 400).",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Message: "Simulated error (status 400)."},
	},
	{
		name: "vLLM's validation error names body.input, the client's field is input", call: "create",
		server: simServer(vllmsim.Options{}),
		body:   `{"model":"` + harmonyModel + `","stream":false}`,
		kind:   KindHTTP, status: 400, typ: "Bad Request", code: "400", param: "body.input",
		msg: "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'input'), 'msg': 'Field required'}",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Param: "input",
			Message: "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'input'), 'msg': 'Field required'}"},
	},
	{
		name: "an index below the field counts the rehydrated input, so only the field is kept", call: "create",
		server: servedWith(400, "application/json", `{"error":{"message":"bad part","type":"Bad Request","param":"body -> input -> 3 -> content","code":"400"}}`),
		kind:   KindHTTP, status: 400, typ: "Bad Request", code: "400", param: "body -> input -> 3 -> content", msg: "bad part",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Param: "input", Message: "bad part"},
	},
	{
		name: "the simulator's context overflow is context_length_exceeded", call: "stream",
		server: simServer(vllmsim.Options{MaxModelLen: 4}),
		body:   simBody(harmonyModel, true, ""),
		kind:   KindHTTP, status: 400, typ: "invalid_request_error", code: "400", param: "input",
		msg: "The engine prompt length 7 exceeds the max_model_len 4. Please reduce prompt.",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: "input",
			Message: "The engine prompt length 7 exceeds the max_model_len 4. Please reduce prompt."},
	},
	{
		name: "vLLM's maximum context length message is context_length_exceeded", call: "create",
		server: servedWith(400, "application/json", `{"error":{"message":"This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens.","type":"BadRequestError","param":null,"code":400}}`),
		kind:   KindHTTP, status: 400, typ: "BadRequestError", code: "400",
		msg: "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens.",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: "input",
			Message: "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens."},
	},
	{
		name: "a max_tokens overflow points at max_output_tokens", call: "create",
		server: servedWith(400, "application/json", `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778).","type":"BadRequestError","param":null,"code":400}}`),
		kind:   KindHTTP, status: 400, typ: "BadRequestError", code: "400",
		msg: "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778).",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: "max_output_tokens",
			Message: "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778)."},
	},
	{
		name: "a newer vLLM's string code that is the status is null too", call: "create",
		server: servedWith(400, "application/json", `{"error":{"message":"bad","type":"BadRequestError","param":null,"code":"400"}}`),
		kind:   KindHTTP, status: 400, typ: "BadRequestError", code: "400", msg: "bad",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Message: "bad"},
	},
	// 404 unknown model: model_not_found on param model.
	{
		name: "the simulator's unknown model is model_not_found", call: "create",
		server: simServer(vllmsim.Options{}),
		body:   simBody("gpt-nope", false, ""),
		kind:   KindHTTP, status: 404, typ: "NotFoundError", code: "404", param: "model", msg: "The model `gpt-nope` does not exist.",
		api: wire.APIError{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model", Message: "The model `gpt-nope` does not exist."},
	},
	{
		name: "an unknown model named by a path keeps the name in the message", call: "create",
		server: simServer(vllmsim.Options{}),
		body:   simBody("/models/nope", false, ""),
		kind:   KindHTTP, status: 404, typ: "NotFoundError", code: "404", param: "model", msg: "The model `/models/nope` does not exist.",
		api: wire.APIError{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model", Message: "The model `/models/nope` does not exist."},
	},
	{
		name: "vLLM's route-level 404 is the gateway's problem", call: "stream",
		server: servedWith(404, "application/json", `{"error":{"message":"Not Found","type":"Not Found","param":null,"code":404}}`),
		kind:   KindHTTP, status: 404, typ: "Not Found", code: "404", msg: "Not Found",
		api: wire.APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: "upstream does not serve this route (status 404)"},
	},
	// 501 tool_choice: the client's value is unsupported.
	{
		name: "the simulator's harmony 501 for tool_choice is 400 unsupported_value", call: "stream",
		server: simServer(vllmsim.Options{}),
		body:   simBody(harmonyModel, true, `,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"required"`),
		kind:   KindHTTP, status: 501, typ: "NotImplementedError", code: "501",
		msg: "Only 'auto' or 'none' tool_choice is supported in response API with Harmony",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Code: "unsupported_value", Param: "tool_choice",
			Message: "Only 'auto' or 'none' tool_choice is supported in response API with Harmony"},
	},
	{
		name: "vLLM's other spelling of the tool_choice 501", call: "create",
		server: servedWith(501, "application/json", `{"error":{"message":"Only 'auto' and 'none' tool_choice are supported","type":"NotImplementedError","param":null,"code":501}}`),
		kind:   KindHTTP, status: 501, typ: "NotImplementedError", code: "501", msg: "Only 'auto' and 'none' tool_choice are supported",
		api: wire.APIError{Status: 400, Type: "invalid_request_error", Code: "unsupported_value", Param: "tool_choice",
			Message: "Only 'auto' and 'none' tool_choice are supported"},
	},
	// Timeouts: one envelope whichever timer fired, streamed or not.
	{
		name: "a connect timeout on a stream is upstream_timeout", call: "stream",
		server: func(t *testing.T) string { return testnet.SilentServer(t) },
		mod:    func(c *Config) { c.ConnectTimeout = 100 * time.Millisecond },
		kind:   KindTimeout,
		api:    wire.APIError{Status: 504, Type: "server_error", Code: "upstream_timeout", Message: msgTimeout},
	},
	{
		name: "an idle timeout on a non-streamed body is the same upstream_timeout", call: "create",
		server: func(t *testing.T) string {
			srv, _ := stallServer(t, "application/json", `{"id":"resp_1","output":[`)
			return srv.URL
		},
		mod:  func(c *Config) { c.IdleTimeout = 100 * time.Millisecond },
		kind: KindTimeout,
		api:  wire.APIError{Status: 504, Type: "server_error", Code: "upstream_timeout", Message: msgTimeout},
	},
}

// TestErrorMapping checks every row of the upstream error table (docs/errors.md): the *Error the
// client builds and the envelope, status and Retry-After the gateway's client gets.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	runErrorCases(t, mappingCases)
}

// TestTimeoutMessageMatchesTheServers: the server writes this exact sentence when its own bound
// of a non-streamed call fires (server/turn.go), so both timeouts read the same to a client.
func TestTimeoutMessageMatchesTheServers(t *testing.T) {
	t.Parallel()
	e := &Error{Kind: KindTimeout}
	if got := e.APIError().Message; got != "The upstream model server did not answer in time." {
		t.Errorf("timeout message %q", got)
	}
}

func TestRetryAfterValues(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"7":                                 "7",
		" 0120 ":                            "120",
		"0":                                 "0",
		"Wed, 21 Oct 2026 07:28:00 GMT":     "Wed, 21 Oct 2026 07:28:00 GMT",
		"Wednesday, 21-Oct-26 07:28:00 GMT": "Wed, 21 Oct 2026 07:28:00 GMT", // RFC 850, normalised
		"":                                  "",
		"-1":                                "",
		"1.5":                               "",
		"99999999999":                       "",
		"soon":                              "",
		"7\r\nSet-Cookie: a=b":              "",
	} {
		if got := retryAfter(in); got != want {
			t.Errorf("retryAfter(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigStringNeverPrintsAnUnparseableURL(t *testing.T) {
	for _, base := range []string{"http://user:pa%ss@vllm:8000/v1", "http://user:s3cr%zz@vllm/v1", "ht tp://user:secretpw@x/v1"} {
		s := Config{BaseURL: base}.String()
		if strings.Contains(s, "pa%ss") || strings.Contains(s, "s3cr") || strings.Contains(s, "secretpw") {
			t.Errorf("Config.String printed a password: %s", s)
		}
	}
}

// TestErrorEventsMapLikeTheSameAnswer: an error event mid-stream becomes the Error a non-streamed
// call gets for the same failure, so the gateway's response.failed carries the same code and
// message as the envelope (docs/errors.md, "Streamed turns"). The simulator's generation error
// is checked both ways; the other forms are what OpenAI-compatible servers send.
func TestErrorEventsMapLikeTheSameAnswer(t *testing.T) {
	t.Parallel()
	base := simServer(vllmsim.Options{})(t)
	c := newTestClient(t, base, nil)
	_, err := c.Create(t.Context(), []byte(simBody(vllmsim.ParserModel+"?error_after=3", false, "")))
	var created *Error
	if !errors.As(err, &created) {
		t.Fatalf("create: %v", err)
	}
	s, err := c.Stream(t.Context(), []byte(simBody(vllmsim.ParserModel+"?error_after=3", true, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var events int
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatalf("the stream ended (%v) after %d events without its error event", err, events)
		}
		if ev.Type == wire.EventError {
			streamed, want := s.EventError(ev.Data).APIError(), created.APIError()
			if *streamed != *want || want.Code != "upstream_error" || want.Message != "Internal server error" {
				t.Errorf("error event maps to %+v, the same error not streamed to %+v", streamed, want)
			}
			break
		}
		events++
	}
	if events != 3 {
		t.Errorf("%d events before the error event, want 3", events)
	}
	for data, want := range map[string]wire.APIError{
		`{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null,"sequence_number":4}`: {
			Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "slow down"},
		`{"type":"error","sequence_number":4,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"This model's maximum context length is 8 tokens.","param":"input"}}`: {
			Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: "input", Message: "This model's maximum context length is 8 tokens."},
		`{"error":{"message":"engine dead at /opt/vllm/x.py","type":"InternalServerError","param":null,"code":500}}`: {
			Status: 502, Type: "server_error", Code: "upstream_error", Message: "engine dead at [path]"},
		`{"type":"error","code":"server_error","message":"boom"}`: {
			Status: 502, Type: "server_error", Code: "upstream_error", Message: "boom"},
		`not json`: {
			Status: 502, Type: "server_error", Code: "upstream_error", Message: "upstream error (status 500)"},
	} {
		if got := s.EventError([]byte(data)).APIError(); *got != want {
			t.Errorf("%s\n got %+v\nwant %+v", data, got, want)
		}
	}
}
