package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// clientError is what an openai-go client sees of a failed turn: the envelope's fields, the
// status and Retry-After for an error before the stream, or the code and message of
// response.failed (and of the stored response) after it.
type clientError struct {
	status                int
	typ, code, param, msg string
	retryAfter            string
}

// upstreamRow is one upstream refusal or failure of the table in docs/errors.md.
type upstreamRow struct {
	name   string
	model  string // the model, with the simulator's fault query
	extra  string // more request members
	before string // what respgate answered before issue 21, for the record
	want   clientError
	// midStream: the failure comes after the first event, so a stream reports it in
	// response.failed (code and message of want); not streamed it is still want's envelope.
	midStream bool
	// prefix: want.msg is a prefix (vLLM's text names a token count respgate's rehydration sets).
	prefix bool
}

// The gateway of the table test has a small context, so a long input overflows it, and short
// upstream timeouts, so a stall ends quickly (the stall itself is 30s, never waited for).
const tableMaxModelLen = 48

var longInput = strings.Repeat("word ", 60)

var upstreamRows = []upstreamRow{
	{name: "tool_choice required on harmony", model: harmony, extra: `,"tool_choice":"required","tools":` + tools,
		before: `502 server_error upstream_error "upstream error (status 501)"`,
		want: clientError{status: 400, typ: "invalid_request_error", code: "unsupported_value", param: "tool_choice",
			msg: "Only 'auto' or 'none' tool_choice is supported in response API with Harmony"}},
	{name: "named function tool_choice on harmony", model: harmony, extra: `,"tool_choice":{"type":"function","name":"get_weather"},"tools":` + tools,
		before: `502 server_error upstream_error "upstream error (status 501)"`,
		want: clientError{status: 400, typ: "invalid_request_error", code: "unsupported_value", param: "tool_choice",
			msg: "Only 'auto' or 'none' tool_choice is supported in response API with Harmony"}},
	{name: "unknown model", model: "gpt-nope",
		before: `404 code "404"`,
		want: clientError{status: 404, typ: "invalid_request_error", code: "model_not_found", param: "model",
			msg: "The model `gpt-nope` does not exist."}},
	{name: "vLLM 400 with param body.input", model: harmony + "?error=input_item",
		before: `400 code "400" param null`,
		want: clientError{status: 400, typ: "invalid_request_error", param: "input",
			msg: "1 validation error:\n  {'type': 'model_type', 'loc': ('body', 'input'), 'msg': 'Input should be a valid input item'}"}},
	{name: "any other vLLM 400", model: harmony + "?status=400",
		before: `400 code "400" param null`,
		want:   clientError{status: 400, typ: "invalid_request_error", msg: "Simulated error (status 400)."}},
	{name: "context too long, parser path", model: parser, extra: `,"input":"` + longInput + `"`,
		before: `400 code "400" param null`,
		want: clientError{status: 400, typ: "invalid_request_error", code: "context_length_exceeded", param: "input",
			msg: "This model's maximum context length is 48 tokens. However, your request has "}, prefix: true},
	{name: "context too long, harmony", model: harmony, extra: `,"input":"` + longInput + `"`,
		before: `400 code "400" param null`,
		want: clientError{status: 400, typ: "invalid_request_error", code: "context_length_exceeded", param: "input",
			msg: "The engine prompt length "}, prefix: true},
	{name: "429 with Retry-After", model: harmony + "?status=429&retry_after=7",
		before: `429 invalid_request_error code "429" (issue 21's table)`,
		want:   clientError{status: 429, typ: "requests", code: "rate_limit_exceeded", msg: "Simulated error (status 429).", retryAfter: "7"}},
	{name: "503 with Retry-After", model: harmony + "?status=503&retry_after=30",
		before: `503 invalid_request_error code "503"`,
		want:   clientError{status: 503, typ: "server_error", code: "upstream_unavailable", msg: "Simulated error (status 503).", retryAfter: "30"}},
	{name: "503 without Retry-After", model: harmony + "?status=503",
		before: `503 invalid_request_error code "503"`,
		want:   clientError{status: 503, typ: "server_error", code: "upstream_unavailable", msg: "Simulated error (status 503).", retryAfter: "1"}},
	{name: "generation error after the first event", model: harmony + "?error_after=6", midStream: true,
		before: `stream: response.failed server_error "Internal server error"; not streamed: 502 upstream_error "Internal server error"`,
		want:   clientError{status: 502, typ: "server_error", code: "upstream_error", msg: "Internal server error"}},
	{name: "stream cut after the first event", model: harmony + "?cut_after=6", midStream: true,
		before: `stream: response.failed server_error "The upstream model server stream failed…"; not streamed: 502 upstream_error "upstream connection broken"`,
		want: clientError{status: 502, typ: "server_error", code: "upstream_error",
			msg: "The connection to the upstream model server broke before the response was complete."}},
	{name: "malformed event after the first event", model: harmony + "?malformed=6", midStream: true,
		before: `stream: response.failed server_error "The upstream model server sent an invalid event."; not streamed: 502 upstream_error "upstream sent an unexpected answer (status 200)"`,
		want: clientError{status: 502, typ: "server_error", code: "upstream_error",
			msg: "The upstream model server sent an answer the gateway cannot read (status 200)."}},
	{name: "stall after the first event", model: harmony + "?stall=30&stall_after=6", midStream: true,
		before: `stream: response.failed server_error "The upstream model server stream failed…"; not streamed: 504 upstream_timeout`,
		want:   clientError{status: 504, typ: "server_error", code: "upstream_timeout", msg: "The upstream model server did not answer in time."}},
}

// simErrors is what a client gets for each of vLLM's error answers the simulator knows
// (vllmsim.ErrorNames, chosen with error=NAME), before any event, streamed or not.
var simErrors = map[string]clientError{
	"json_invalid": {status: 400, typ: "invalid_request_error",
		msg: "1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error'}"},
	"media_type": {status: 400, typ: "invalid_request_error",
		msg: "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"},
	"input_missing": {status: 400, typ: "invalid_request_error", param: "input",
		msg: "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'input'), 'msg': 'Field required'}"},
	"input_list": {status: 400, typ: "invalid_request_error", param: "input",
		msg: "1 validation error:\n  {'type': 'list_type', 'loc': ('body', 'input'), 'msg': 'Input should be a valid list'}"},
	"input_item": {status: 400, typ: "invalid_request_error", param: "input",
		msg: "1 validation error:\n  {'type': 'model_type', 'loc': ('body', 'input'), 'msg': 'Input should be a valid input item'}"},
	"field_type": {status: 400, typ: "invalid_request_error", param: "temperature",
		msg: "1 validation error:\n  {'type': 'type_error', 'loc': ('body', 'temperature'), 'msg': 'Input should be a valid float64'}"},
	"no_call":            {status: 400, typ: "invalid_request_error", msg: "No call message found for call_1"},
	"unknown_input_type": {status: 400, typ: "invalid_request_error", msg: "Unknown input type: web_search_call"},
	"encrypted_content":  {status: 400, typ: "invalid_request_error", msg: "Encrypted content is not supported."},
	"max_tokens":         {status: 400, typ: "invalid_request_error", msg: "max_tokens must be at least 1, got 0."},
	"unknown_model": {status: 404, typ: "invalid_request_error", code: "model_not_found", param: "model",
		msg: "The model `gpt-nope` does not exist."},
	"response_not_found": {status: 404, typ: "invalid_request_error", param: "response_id", msg: "Response with id 'resp_nope' not found."},
	"tool_choice": {status: 400, typ: "invalid_request_error", code: "unsupported_value", param: "tool_choice",
		msg: "Only 'auto' or 'none' tool_choice is supported in response API with Harmony"},
	"context_length": {status: 400, typ: "invalid_request_error", code: "context_length_exceeded", param: "input",
		msg: "The engine prompt length 49 exceeds the max_model_len 48. Please reduce prompt."},
	"generation":         {status: 502, typ: "server_error", code: "upstream_error", msg: "Internal server error"},
	"route_not_found":    {status: 502, typ: "server_error", code: "upstream_error", msg: "upstream does not serve this route (status 404)"},
	"method_not_allowed": {status: 502, typ: "server_error", code: "upstream_error", msg: "upstream does not serve this route (status 405)"},
	"body_too_large":     {status: 413, typ: "invalid_request_error", msg: "Request Entity Too Large"},
}

// TestUpstreamErrorTable is the table test of issue 21 (docs/errors.md): every row of the
// upstream mapping and every vLLM error text the simulator knows, through respgate to an
// openai-go client, streamed and not. An error before the first event is the same envelope,
// status and Retry-After both ways; a failure after it is response.failed carrying the code and
// message that envelope has, and the stored response carries them too.
func TestUpstreamErrorTable(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{
			Sim:      vllmsim.Options{MaxModelLen: tableMaxModelLen},
			Upstream: upstream.Config{ConnectTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second},
			Server:   server.Config{SyncTimeout: 2 * time.Second},
		})
		for _, row := range upstreamRows {
			t.Run(row.name, func(t *testing.T) {
				body := `{"model":"` + row.model + `"` + row.extra
				if !strings.Contains(row.extra, `"input"`) {
					body += `,"input":"hi"`
				}
				sync := g.clientError(t, body+`,"stream":false}`)
				checkClientError(t, "not streamed", sync, row.want, row.prefix)
				var streamed clientError
				if row.midStream {
					streamed = g.failedStream(t, body+`,"stream":true}`)
					want := clientError{code: row.want.code, msg: row.want.msg}
					checkClientError(t, "streamed", streamed, want, row.prefix)
				} else {
					streamed = g.clientStreamError(t, body+`,"stream":true}`)
					checkClientError(t, "streamed", streamed, row.want, row.prefix)
				}
				// The closing note's "after" column, as the client saw it (go test -v).
				t.Logf("after | %s | not streamed: %+v | streamed: %+v | before: %s", row.name, sync, streamed, row.before)
			})
		}
		for _, name := range vllmsim.ErrorNames() {
			t.Run("sim error "+name, func(t *testing.T) {
				want, ok := simErrors[name]
				if !ok {
					t.Fatalf("the simulator knows vLLM error %q, the table has no row for it", name)
				}
				body := `{"model":"` + harmony + `?error=` + name + `","input":"hi"`
				checkClientError(t, "not streamed", g.clientError(t, body+`,"stream":false}`), want, false)
				checkClientError(t, "streamed", g.clientStreamError(t, body+`,"stream":true}`), want, false)
			})
		}
	})
}

func checkClientError(t *testing.T, path string, got, want clientError, prefix bool) {
	t.Helper()
	msgOK := got.msg == want.msg || prefix && strings.HasPrefix(got.msg, want.msg)
	got.msg, want.msg = "", ""
	if !msgOK || got != want {
		t.Errorf("%s: got %+v message %q, want %+v message %q", path, got, got.msg, want, want.msg)
	}
}

// apiError converts the error of an openai-go call.
func apiError(t *testing.T, err error) clientError {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *openai.Error", err, err)
	}
	return clientError{status: e.StatusCode, typ: e.Type, code: e.Code, param: e.Param, msg: e.Message,
		retryAfter: e.Response.Header.Get("Retry-After")}
}

// clientError sends a non-streamed request that must fail.
func (g *gw) clientError(t *testing.T, body string) clientError {
	t.Helper()
	r, err := g.client.Responses.New(t.Context(), params(body))
	if err == nil {
		t.Fatalf("request succeeded with status %s", r.Status)
	}
	return apiError(t, err)
}

// clientStreamError sends a streamed request that must fail before its first event.
func (g *gw) clientStreamError(t *testing.T, body string) clientError {
	t.Helper()
	s := g.client.Responses.NewStreaming(t.Context(), params(body))
	defer s.Close()
	for s.Next() {
		t.Fatalf("streamed event %s before the error", s.Current().Type)
	}
	return apiError(t, s.Err())
}

// failedStream sends a streamed request that must end in response.failed, and checks that the
// stored response carries the same error.
func (g *gw) failedStream(t *testing.T, body string) clientError {
	t.Helper()
	s := g.stream(t, body)
	if s.final.Status != "failed" {
		t.Fatalf("terminal status %s, want failed", s.final.Status)
	}
	if len(s.events) < 3 {
		t.Fatalf("%d events: the failure was not after the first event", len(s.events))
	}
	got := clientError{code: string(s.final.Error.Code), msg: s.final.Error.Message}
	stored, err := g.client.Responses.Get(t.Context(), s.final.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != "failed" || string(stored.Error.Code) != got.code || stored.Error.Message != got.msg {
		t.Errorf("stored %s %+v, streamed failed %+v", stored.Status, stored.Error, got)
	}
	return got
}
