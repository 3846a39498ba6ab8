package wire

import (
	"encoding/json"
	"strings"
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

// TestAppendStringWritesTheMinimalForm: the one quoter writes RFC 8785's minimal form, as
// Python (and so vLLM) does: short escapes where JSON has them, nothing escaped that need not be.
func TestAppendStringWritesTheMinimalForm(t *testing.T) {
	cases := map[string]string{
		"plain":             `"plain"`,
		"a\"b\\c\n\r\t\b\f": `"a\"b\\c\n\r\t\b\f"`,
		"\x00\x1f\x7f":      "\"\\u0000\\u001f\x7f\"",
		"<&>":               `"<&>"`,
		"bad \xff\xfe":      "\"bad \ufffd\ufffd\"",
		"\u2028\u2029":      "\"\u2028\u2029\"",
		"né 🙂":              `"né 🙂"`,
	}
	for in, want := range cases {
		if got := string(AppendString(nil, in)); got != want {
			t.Errorf("AppendString(%q) = %q, want %q", in, got, want)
		}
		if got := string(AppendStringBytes(nil, []byte(in))); got != want {
			t.Errorf("AppendStringBytes(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAppendStringDoesNotAllocate: quoting into a buffer with room costs no allocation, however
// long the string (the accumulator quotes every delta).
func TestAppendStringDoesNotAllocate(t *testing.T) {
	s := strings.Repeat("a long delta with \"quotes\", é and\n", 64)
	dst := make([]byte, 0, 4*len(s))
	if n := testing.AllocsPerRun(100, func() { dst = AppendString(dst[:0], s) }); n != 0 {
		t.Errorf("AppendString allocates %v times per call", n)
	}
	b := []byte(s)
	if n := testing.AllocsPerRun(100, func() { dst = AppendStringBytes(dst[:0], b) }); n != 0 {
		t.Errorf("AppendStringBytes allocates %v times per call", n)
	}
}

// FuzzAppendString: quoting any bytes gives valid JSON and valid UTF-8 that reads back as their
// valid form (each invalid byte a U+FFFD).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\x00\x1f", "bad\xff", "\xed\xa0\x80", "\u2028", "q\"b\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q := AppendStringBytes(nil, b)
		var back string
		if !utf8.Valid(q) || json.Unmarshal(q, &back) != nil {
			t.Fatalf("AppendStringBytes(%q) = %q is not valid", b, q)
		}
		var want []rune
		for rest := b; len(rest) > 0; {
			r, n := utf8.DecodeRune(rest)
			want = append(want, r)
			rest = rest[n:]
		}
		if back != string(want) {
			t.Fatalf("AppendStringBytes(%q) reads back as %q, want %q", b, back, string(want))
		}
		if string(AppendString(nil, string(b))) != string(q) {
			t.Fatalf("AppendString and AppendStringBytes differ on %q", b)
		}
	})
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
