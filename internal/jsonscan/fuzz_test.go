package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// jsontextRules are the package rules as jsontext options: invalid UTF-8 and duplicate names are
// allowed (jsontext's nesting bound is 10,000, so depthOf checks MaxDepth).
var jsontextRules = []jsontext.Options{jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true)}

// depthOf returns the deepest nesting of arrays and objects in valid JSON.
func depthOf(b []byte) int {
	d, max, inStr := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[' || c == '{':
			d++
			max = maxInt(max, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return max
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// stringFlags computes the flags of every string in valid JSON from jsontext's tokens.
func stringFlags(t *testing.T, b []byte) Flags {
	var f Flags
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontextRules...)
	for {
		v, err := d.ReadValue()
		if err != nil {
			return f
		}
		// Walk the tokens of v: strings are where the flags come from.
		td := jsontext.NewDecoder(bytes.NewReader(v), jsontextRules...)
		for {
			if td.PeekKind() == '"' {
				s, err := td.ReadValue()
				if err != nil {
					t.Fatalf("jsontext re-read: %v", err)
				}
				if bytes.IndexByte(s, '\\') >= 0 {
					f |= Escaped
				}
				if !utf8.Valid(s) {
					f |= BadUTF8
				}
				continue
			}
			if _, err := td.ReadToken(); err != nil {
				break
			}
		}
	}
}

// FuzzScan holds the shared rules to jsontext, the tokenizer of Go's encoding/json/v2: the scanner
// accepts exactly what jsontext accepts (invalid UTF-8 and duplicate names allowed, as the rules
// say) nested at most MaxDepth deep; its flags match the strings jsontext reads; object iteration
// sees the members jsontext sees; AppendUnescaped decodes as encoding/json does for valid UTF-8.
// (Quoting is wire.AppendString's, fuzzed there.) The seeds cover each rule's edges;
// commit crashers under testdata/fuzz/FuzzScan.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,-2.5e+3,"x\u00e9\n",true,false,null,{"b":{}}]}`, `"\ud800"`,
		`[1,]`, `{"a" 1}`, `01`, `1.`, `-`, `"\x"`, "\"\x01\"", `[[[[`, ` {"a":"b"} `, "\"\xff\"",
		`{"a":1,"a":2}`, "{\"k\xff\":\"\xe2\x98\"}", `"\ud83d\ude42\ud83d"`, nested("[", "]", MaxDepth),
		nested("[", "]", MaxDepth+1), nested(`{"k":`, "}", MaxDepth), nested(`{"k":`, "}", MaxDepth+1),
		`{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"word "}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := Scan(b)
		ok := err == nil
		want := jsontext.Value(b).IsValid(jsontextRules...) &&
			depthOf(b) <= MaxDepth
		if ok != want {
			t.Fatalf("Scan ok=%v (%v), jsontext and the depth rule say %v, for %q", ok, err, want, b)
		}
		if !ok {
			return
		}
		if v := sp.Bytes(b); !bytes.Equal(v, bytes.Trim(b, " \t\r\n")) {
			t.Fatalf("span %q of %q", v, b)
		}
		if got, want := sp.F, stringFlags(t, b); got != want {
			t.Fatalf("flags %b, want %b, for %q", got, want, b)
		}

		// Object members, in order, as jsontext reads them.
		if sp.Kind(b) == '{' {
			o := NewObj(b, 0, 0)
			d := jsontext.NewDecoder(bytes.NewReader(b), jsontextRules...)
			if _, err := d.ReadToken(); err != nil {
				t.Fatal(err)
			}
			for m, more := o.Next(); more; m, more = o.Next() {
				k, err1 := d.ReadValue()
				k = k.Clone() // valid only until the next read
				v, err2 := d.ReadValue()
				if err1 != nil || err2 != nil || !bytes.Equal(k, m.Key.Bytes(b)) || !bytes.Equal(v, m.Val.Bytes(b)) {
					t.Fatalf("member %s:%s, jsontext %s:%s", m.Key.Bytes(b), m.Val.Bytes(b), k, v)
				}
			}
			if o.Finish() != nil || d.PeekKind() != '}' {
				t.Fatalf("object iteration ended early in %q", b)
			}
		}

		// A string decodes as encoding/json decodes it, when it is valid UTF-8.
		if sp.IsStr(b) && sp.F&BadUTF8 == 0 {
			var s string
			if err := json.Unmarshal(sp.Bytes(b), &s); err != nil {
				t.Fatal(err)
			}
			if got := AppendUnescaped(nil, sp.Inner(b)); string(got) != s {
				t.Fatalf("AppendUnescaped %q, encoding/json %q", got, s)
			}
		}

	})
}
