package wire

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppendStringWritesJSONWhateverTheString(t *testing.T) {
	for _, s := range []string{"msg_a\u0007b", "\x00", "q\"b\\", "\u2028\u2029", "bad\xff", "\xed\xa0\x80", "plain"} {
		out := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil || !utf8.Valid(out) {
			t.Fatalf("AppendString(%q) = %q: %v", s, out, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("AppendString(%q) decodes to %q", s, back)
		}
	}
}

func TestAppendRawReplacesInvalidUTF8AndWritesNullForEmpty(t *testing.T) {
	if got := string(AppendRaw(nil, nil)); got != "null" {
		t.Fatalf("empty: %s", got)
	}
	if got := string(AppendRaw(nil, []byte("{\"k\":\"a\xffb\"}"))); got != "{\"k\":\"a\uFFFDb\"}" {
		t.Fatalf("invalid UTF-8: %q", got)
	}
	valid := []byte(`{"k":"é"}`)
	if got := ValidUTF8(valid); &got[0] != &valid[0] {
		t.Fatalf("ValidUTF8 copied valid input")
	}
}
