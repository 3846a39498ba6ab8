package vllmsim

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestFaultErrorAfter: error_after=N writes N events, then the bare data frame vLLM's streaming
// routes write for a generation error, then drops the connection (no terminal event); without
// streaming the answer is vLLM's 500 for the same error.
func TestFaultErrorAfter(t *testing.T) {
	srv, _ := newServer(t, Options{})
	const frame = `data: {"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}` + "\n\n"
	for _, n := range []int{0, 4} {
		r := post(t, srv, body(ParserModel+"?error_after="+strconv.Itoa(n), true, chatHistory))
		if r.status != 200 || r.readErr == nil {
			t.Errorf("error_after=%d: status %d, read error %v: want 200 and a dropped connection", n, r.status, r.readErr)
		}
		head, tail, ok := strings.Cut(string(r.raw), frame)
		if !ok || tail != "" {
			t.Fatalf("error_after=%d: no error frame at the end of %q", n, r.raw)
		}
		if got := strings.Count(head, "event: "); got != n || strings.Contains(head, "response.completed") {
			t.Errorf("error_after=%d: %d events before the error frame (%q)", n, got, head)
		}
	}
	r := post(t, srv, body(HarmonyModel+"?error_after=3", false, `"input":"hi"`))
	vllmErr(t, r, http.StatusInternalServerError, "InternalServerError", nil, "Internal server error")
}

// TestFaultErrorNames: error=NAME answers with each of vLLM's error answers the simulator knows, in
// vLLM's envelope (integer code equal to the status), streamed or not, whatever the request; an
// unknown name is refused like any bad fault.
func TestFaultErrorNames(t *testing.T) {
	srv, sim := newServer(t, Options{MaxModelLen: 64})
	for _, name := range ErrorNames() {
		build, _ := knownError(name)
		for _, model := range []string{HarmonyModel, ParserModel} {
			d, _ := sim.lookup(model)
			want := build(d.Dialect, 64)
			for _, stream := range []bool{false, true} {
				r := post(t, srv, body(model+"?error="+name, stream, `"input":"hi"`))
				p := any(nil)
				if want.param != "" {
					p = want.param
				}
				vllmErr(t, r, want.status, want.typ, p, want.message)
				if want.status < 400 || want.message == "" {
					t.Errorf("%s: %d %q is not an error answer", name, want.status, want.message)
				}
			}
		}
	}
	r := post(t, srv, body(HarmonyModel+"?error=nope", false, `"input":"hi"`))
	vllmErr(t, r, http.StatusBadRequest, "BadRequestError", nil, "want one of json_invalid")
	build, _ := knownError("context_length")
	if h, p := build(Harmony, 64), build(ReasoningParser, 64); !strings.Contains(h.message, "max_model_len 64") ||
		!strings.HasPrefix(p.message, "This model's maximum context length is 64 tokens.") {
		t.Errorf("context_length wording: harmony %q, parser %q", h.message, p.message)
	}
}
