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

func TestDecodeValueKeepsNumbersAsSpelledAndRejectsTrailingData(t *testing.T) {
	v, err := DecodeValue([]byte(`{"a":1.0,"b":12345678901234567890123,"c":null}`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["a"] != json.Number("1.0") || m["b"] != json.Number("12345678901234567890123") {
		t.Fatalf("numbers not kept as spelled: %#v", m)
	}
	if c, ok := m["c"]; !ok || c != nil {
		t.Fatalf("null member: got %#v, present %v", c, ok)
	}
	for _, bad := range []string{`{"a":1} {"b":2}`, `1 2`, `{"a":`, ``} {
		if _, err := DecodeValue([]byte(bad)); err == nil {
			t.Fatalf("DecodeValue(%q) accepted", bad)
		}
	}
	if _, err := DecodeValue([]byte(" [1] \n")); err != nil {
		t.Fatalf("white space around one value: %v", err)
	}
}
