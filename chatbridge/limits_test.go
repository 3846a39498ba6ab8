package chatbridge

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/respgate/respgate/wire"
)

// The writer's bounds, stated absolutely: MaxDepth counts nested containers (`{"a":{"b":1}}`
// nests 2) and MaxBytes the canonical bytes (`{"a":1}` is 7); a value at a bound is written, one
// past it is not.
func TestCanonWriterBoundsAreTheNestingAndTheBytes(t *testing.T) {
	write := func(raw string, budget, depth int) bool {
		t.Helper()
		v, err := wire.DecodeValue(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		w := canonWriter{budget: budget, maxDepth: depth}
		return w.value(v, 0) == nil
	}
	for _, tc := range []struct {
		raw           string
		budget, depth int
		want          bool
	}{
		{`{"a":{"b":1}}`, 1 << 10, 2, true},
		{`{"a":{"b":1}}`, 1 << 10, 1, false},
		{`[[1]]`, 1 << 10, 2, true},
		{`[[1]]`, 1 << 10, 1, false},
		{`1`, 1 << 10, 0, true},
		{`{"a":1}`, 7, 1, true},
		{`{"a":1}`, 6, 1, false},
		{`"abc"`, 5, 0, true},
		{`"abc"`, 4, 0, false},
	} {
		if got := write(tc.raw, tc.budget, tc.depth); got != tc.want {
			t.Errorf("write %s within %d bytes and depth %d: %v, want %v", tc.raw, tc.budget, tc.depth, got, tc.want)
		}
	}
}

// A request without messages still has an identity: the scope's digest, and nothing else.
func TestIdentifyWithoutMessagesIsTheScopeAlone(t *testing.T) {
	h, ok := Identify(testScope, nil, Limits{})
	if !ok || len(h.Digests) != 1 || h.Scope == "" {
		t.Fatalf("Identify(no messages) = %+v, %v; want the scope's digest only", h, ok)
	}
}

// The records to load for a history are those ending after each assistant message: the chain
// digest right after it, in order.
func TestCandidatesAreTheDigestsAfterEachAssistantMessage(t *testing.T) {
	m := msgs(t, user, `{"role":"assistant","content":"a"}`, `{"role":"user","content":"b"}`, `{"role":"assistant","content":"c"}`)
	h, ok := Identify(testScope, m, Limits{})
	if !ok {
		t.Fatal("not identified")
	}
	got := h.Candidates(m)
	if len(got) != 2 || got[0] != h.Digests[2] || got[1] != h.Digests[4] {
		t.Fatalf("Candidates = %v, want the digests after messages 1 and 3 (%s, %s)", got, h.Digests[2], h.Digests[4])
	}
}

// stream_options.include_usage is read as sent: true asks for the usage chunk, false or absent
// does not; stream_options that is not an object is a 400 naming it.
func TestStreamOptionsIncludeUsageIsReadAsSent(t *testing.T) {
	const head = `{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true`
	for body, want := range map[string]bool{
		head + `,"stream_options":{"include_usage":true}}`:  true,
		head + `,"stream_options":{"include_usage":false}}`: false,
		head + `,"stream_options":{}}`:                      false,
		head + `}`:                                          false,
	} {
		r, err := decodeBody(t, body)
		if err != nil || r.IncludeUsage != want {
			t.Errorf("%s: IncludeUsage %v, err %v; want %v", body, r != nil && r.IncludeUsage, err, want)
		}
	}
	var ae *wire.APIError
	if _, err := decodeBody(t, head+`,"stream_options":[1]}`); !errors.As(err, &ae) || ae.Param != "stream_options" {
		t.Fatalf("stream_options [1]: %v, want a 400 naming stream_options", err)
	}
}

// The token limits are integers from 1 to 2^31, both ends included.
func TestTokenLimitsAcceptOneTo2Pow31(t *testing.T) {
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		for n, ok := range map[string]bool{"0": false, "1": true, "2147483648": true, "2147483649": false} {
			_, err := translate(t, `{"model":"m","messages":[{"role":"user","content":"q"}],"`+name+`":`+n+`}`)
			if (err == nil) != ok {
				t.Errorf("%s %s: err %v, want accepted %v", name, n, err, ok)
			}
		}
	}
}

// An assistant message without tool calls is sent back without a tool_calls member, as its chat
// completion showed it.
func TestEnvelopeWithoutCallsHasNoToolCalls(t *testing.T) {
	env := Envelope(items(t, `{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hi","annotations":[]}]}`))
	var m map[string]json.RawMessage
	if err := json.Unmarshal(env, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["tool_calls"]; ok || string(m["content"]) != `"hi"` {
		t.Fatalf("envelope %s, want the text and no tool_calls", env)
	}
}

// MessageParam at its edges: the first input item, one past the last, an empty or negative
// index, an unclosed bracket.
func TestMessageParamAtItsEdges(t *testing.T) {
	origin := []int{3, 4}
	for in, want := range map[string]string{"input[0].content": "messages[3]", "input[1]": "messages[4]", "input[2]": "messages",
		"input[].x": "messages", "input[-1]": "messages", "input[0": "input[0"} {
		if got := MessageParam(in, origin); got != want {
			t.Errorf("MessageParam(%s) = %s, want %s", in, got, want)
		}
	}
}
