package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// decodeSocketCreate is what a lane does with a response.create message before the engine.
func decodeSocketCreate(msg []byte) (*createRequest, error) {
	members, err := socketCreateMembers(msg, 64)
	if err != nil {
		return nil, err
	}
	return createFromMembers(members)
}

func TestSocketCreateRefusesWhatContradictsTheSocket(t *testing.T) {
	for _, tc := range []struct{ member, param, code string }{
		{`"stream":false`, "stream", "unsupported_parameter"}, {`"stream":null`, "stream", "unsupported_parameter"},
		{`"background":true`, "background", "unsupported_parameter"}, {`"background":null`, "background", "unsupported_parameter"},
		{`"generate":"no"`, "generate", "invalid_type"},
	} {
		_, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x",` + tc.member + `}`))
		var ae *wire.APIError
		if !errors.As(err, &ae) || ae.Param != tc.param || ae.Code != tc.code {
			t.Fatalf("%s: %v", tc.member, err)
		}
	}
	// What Codex CLI sends on every message: no-ops on a socket.
	for _, member := range []string{`"stream":true`, `"stream": true `, `"stream_options":{"include_obfuscation":false}`, `"background":false`, `"stream_id":"a"`} {
		req, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x",` + member + `}`))
		if err != nil || !req.Stream || req.body.Background || req.warmUp {
			t.Fatalf("%s: %+v %v", member, req, err)
		}
	}
	req, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x"}`))
	if err != nil || !req.Stream || !req.Store || req.warmUp {
		t.Fatalf("a plain create: %+v %v", req, err)
	}
	if req, err = decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x","generate":false}`)); err != nil || !req.warmUp {
		t.Fatalf("a warm-up: %+v, %v", req, err)
	}
}

func TestWithStreamIDAddsTheLaneToEveryEvent(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"response.created","sequence_number":0}`: `{"type":"response.created","sequence_number":0,"stream_id":"a\"b"}`,
		`{}`:           `{"stream_id":"a\"b"}`,
		"{\"x\":1}\n ": `{"x":1,"stream_id":"a\"b"}`,
	} {
		if got := string(withStreamID([]byte(in), `a"b`)); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
		var v map[string]any
		if err := json.Unmarshal(withStreamID([]byte(in), "lane-1"), &v); err != nil || v["stream_id"] != "lane-1" {
			t.Errorf("%s: %v %v", in, v, err)
		}
	}
	if got := string(withStreamID([]byte(`{"a":1}`), "")); got != `{"a":1}` {
		t.Errorf("the default lane: %s", got)
	}
}

func TestStreamIDFollowsTheSDKsRule(t *testing.T) {
	for id, ok := range map[string]bool{"a": true, "A.b-c_9": true, "": false, "a b": false, "é": false,
		strings.Repeat("x", 256): true, strings.Repeat("x", 257): false} {
		if validStreamID(id) != ok {
			t.Errorf("%q: %t", id, !ok)
		}
	}
}

func TestSteerFaultAcceptsOnlyUserMessages(t *testing.T) {
	for msg, ok := range map[string]bool{
		`{"type":"response.steer","previous_response_id":"r","input":"go left"}`:                                                                                                                  true,
		`{"type":"response.steer","previous_response_id":"r","input":[{"role":"user","content":"x"}]}`:                                                                                            true,
		`{"type":"response.steer","previous_response_id":"r","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"data:"}]}]}`: true,
		`{"type":"response.steer","previous_response_id":"r","input":""}`:                                                                                                                         false,
		`{"type":"response.steer","previous_response_id":"r","input":[]}`:                                                                                                                         false,
		`{"type":"response.steer","previous_response_id":"r","input":[{"role":"assistant","content":"x"}]}`:                                                                                       false,
		`{"type":"response.steer","previous_response_id":"r","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`:                                                               false,
		`{"type":"response.steer","previous_response_id":"r","input":[{"role":"user","content":[{"type":"output_text","text":"x"}]}]}`:                                                            false,
		`{"type":"response.steer","previous_response_id":"r","input":[{"role":"user","content":"x","id":"m"}]}`:                                                                                   false,
		`{"type":"response.steer","previous_response_id":"r","input":"x","stream_id":"a"}`:                                                                                                        false,
		`{"type":"response.steer","input":"x"}`:                                                                                                                                                   false,
	} {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(msg), &m); err != nil {
			t.Fatal(err)
		}
		if got := steerFault(m); (got == "") != ok {
			t.Errorf("%s: fault %q", msg, got)
		}
	}
}

func TestPrependSteersLeadsTheInputInSubmissionOrder(t *testing.T) {
	steers := []*steerInput{{input: json.RawMessage(`"first"`)}, {input: json.RawMessage(`[{"role":"user","content":"second"}]`)}}
	for input, want := range map[string]string{
		``:        `[{"type":"message","role":"user","content":"first"},{"role":"user","content":"second"}]`,
		`"third"`: `[{"type":"message","role":"user","content":"first"},{"role":"user","content":"second"},{"type":"message","role":"user","content":"third"}]`,
		`[{"type":"function_call_output","call_id":"c","output":"o"}]`: `[{"type":"message","role":"user","content":"first"},{"role":"user","content":"second"},{"type":"function_call_output","call_id":"c","output":"o"}]`,
	} {
		var raw json.RawMessage
		if input != "" {
			raw = json.RawMessage(input)
		}
		if got := string(prependSteers(steers, raw)); got != want {
			t.Errorf("%s: %s", input, got)
		}
	}
}
