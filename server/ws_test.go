package server

import (
	"errors"
	"testing"

	"github.com/respgate/respgate/wire"
)

func TestDecodeSocketCreateRefusesWhatContradictsTheSocket(t *testing.T) {
	for _, tc := range []struct{ member, param, code string }{
		{`"stream":false`, "stream", "unsupported_parameter"}, {`"stream":null`, "stream", "unsupported_parameter"},
		{`"background":true`, "background", "unsupported_parameter"}, {`"background":null`, "background", "unsupported_parameter"},
		{`"generate":"no"`, "generate", "invalid_type"},
	} {
		_, _, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x",`+tc.member+`}`), 64)
		var ae *wire.APIError
		if !errors.As(err, &ae) || ae.Param != tc.param || ae.Code != tc.code {
			t.Fatalf("%s: %v", tc.member, err)
		}
	}
	// What Codex CLI sends on every message: no-ops on a socket.
	for _, member := range []string{`"stream":true`, `"stream": true `, `"stream_options":{"include_obfuscation":false}`, `"background":false`} {
		req, generate, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x",`+member+`}`), 64)
		if err != nil || !req.Stream || req.body.Background || !generate {
			t.Fatalf("%s: %+v %v", member, req, err)
		}
	}
	req, generate, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x"}`), 64)
	if err != nil || !req.Stream || !req.Store || !generate {
		t.Fatalf("a plain create: %+v %v", req, err)
	}
	if _, generate, err = decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x","generate":false}`), 64); err != nil || generate {
		t.Fatalf("a warm-up: generate %v, %v", generate, err)
	}
}

// The terminal event frees the connection for the next create (the sink's endTurn); the end of
// that turn's code, which runs after, must not free a create accepted in between.
func TestSocketTurnEndFreesTheConnectionOnce(t *testing.T) {
	var k socket
	k.busy.Store(true) // the reader accepted a create
	k.turnOpen.Store(true)
	k.endTurn() // the sink wrote the terminal event
	if k.busy.Load() {
		t.Fatal("the terminal event did not free the connection")
	}
	if !k.busy.CompareAndSwap(false, true) { // the reader accepts the next create
		t.Fatal("the next create was refused")
	}
	k.endTurn() // the first turn's code returns
	if !k.busy.Load() {
		t.Fatal("the end of the previous turn freed the connection during the next")
	}
}
