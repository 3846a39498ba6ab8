package jsonscan

import (
	"errors"
	"strings"
	"testing"
)

func nested(open, close string, n int) string {
	return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
}

// The nesting rule: at most MaxDepth arrays and objects, counting the outermost, and empty ones
// count too. The accumulator's old scanner had this bound; rehydrate's allowed 10,000.
func TestDepthRule(t *testing.T) {
	cases := []struct {
		name string
		in   string
		ok   bool
	}{
		{"arrays at the limit", nested("[", "]", MaxDepth), true},
		{"arrays one past", nested("[", "]", MaxDepth+1), false},
		{"objects at the limit", nested(`{"k":`, "}", MaxDepth), true},
		{"objects one past", nested(`{"k":`, "}", MaxDepth+1), false},
		{"mixed at the limit", nested(`[{"k":`, "}]", MaxDepth/2), true},
		{"mixed one past", "[" + nested(`{"k":[`, "]}", MaxDepth/2) + "]", false},
		{"an empty array at the limit", strings.Repeat("[", MaxDepth-1) + "[]" + strings.Repeat("]", MaxDepth-1), true},
		{"an empty array one past", strings.Repeat("[", MaxDepth) + "[]" + strings.Repeat("]", MaxDepth), false},
		{"an empty object one past", strings.Repeat("[", MaxDepth) + "{}" + strings.Repeat("]", MaxDepth), false},
		{"wide but shallow", "[" + strings.Repeat("[1],", 10000) + "[]]", true},
		{"far too deep", nested("[", "]", 100000), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Valid([]byte(c.in)); got != c.ok {
				t.Errorf("Valid = %v, want %v", got, c.ok)
			}
		})
	}
}

// Iterators and SkipValue count the depth their caller says is already open, so a member value
// is bounded as part of the whole document.
func TestDepthCountsFromTheCaller(t *testing.T) {
	obj := []byte(`{"a":` + nested("[", "]", MaxDepth-1) + `}`)
	o := NewObj(obj, 0, 0)
	if err := o.Finish(); err != nil {
		t.Errorf("object at the limit: %v", err)
	}
	o = NewObj(obj, 0, 1)
	if err := o.Finish(); !errors.Is(err, ErrSyntax) {
		t.Errorf("the same object one level down: %v", err)
	}
	arr := []byte(nested("[", "]", 3))
	if _, _, err := SkipValue(arr, 0, MaxDepth-3); err != nil {
		t.Errorf("3 levels with %d open: %v", MaxDepth-3, err)
	}
	if _, _, err := SkipValue(arr, 0, MaxDepth-2); err == nil {
		t.Errorf("3 levels with %d open accepted", MaxDepth-2)
	}
	a := NewArr([]byte(`[[1]]`), 0, MaxDepth-1)
	if _, ok := a.Next(); ok || a.Err() == nil {
		t.Error("an array element past the limit accepted")
	}
}

// The UTF-8 rule: invalid UTF-8 inside a string is accepted and flagged (BadUTF8), never passed
// on unflagged. Rehydrate's old scanner flagged it; the accumulator's passed it silently.
func TestUTF8Rule(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		flags Flags
	}{
		{"ASCII", `"plain text that is long enough for the 8-byte loop"`, 0},
		{"valid multi-byte", `"né 🙂 ☕ and more text after it"`, 0},
		{"a stray continuation byte", "\"a\x80b\"", BadUTF8},
		{"0xff", "\"bad \xff byte\"", BadUTF8},
		{"a rune cut at the end", "\"cut \xe2\x98\"", BadUTF8},
		{"a lead byte alone", "\"\xf0\"", BadUTF8},
		{"an overlong encoding", "\"\xc0\xaf\"", BadUTF8},
		{"an encoded surrogate", "\"\xed\xa0\x80\"", BadUTF8},
		{"in a key", "{\"k\xff\":1}", BadUTF8},
		{"deep inside", "[1,{\"a\":[\"x\",\"\xfe\"]}]", BadUTF8},
		{"an escape", `"a\nb"`, Escaped},
		{"a lone surrogate escape is valid JSON", `"\ud800"`, Escaped},
		{"both", "[\"\\t\",\"\xff\"]", Escaped | BadUTF8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp, err := Scan([]byte(c.in))
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if sp.F != c.flags {
				t.Errorf("flags %b, want %b", sp.F, c.flags)
			}
			if sp.Plain() != (c.flags == 0) {
				t.Errorf("Plain %v", sp.Plain())
			}
		})
	}
}

// Syntax is RFC 8259: the cases where hand-written scanners usually drift.
func TestSyntaxRule(t *testing.T) {
	good := []string{`{}`, `[]`, ` {"a":"b"} `, `0`, `-0`, `-0.0e-0`, `1E+2`, `"\u00e9\/"`, `true`, `null`,
		`{"a":[1,-2.5e+3,"x\u00e9\n",true,false,null,{"b":{}}]}`, `{"a":1,"a":2}`, "\t\r\n[1]\n"}
	bad := []string{``, ` `, `[1,]`, `{"a" 1}`, `{"a":1,}`, `{,}`, `[,1]`, `01`, `1.`, `.5`, `-`, `+1`, `1e`,
		`0x1`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"\x01\"", "\"a\nb\"", `[[[[`, `]`, `{"a":1}}`, `[1] [2]`,
		`tru`, `nul`, `True`, `{1:2}`, `'a'`, `"abc`, "[1]\x00", `NaN`, `Infinity`}
	for _, s := range good {
		if !Valid([]byte(s)) {
			t.Errorf("rejected %q", s)
		}
	}
	for _, s := range bad {
		if Valid([]byte(s)) {
			t.Errorf("accepted %q", s)
		}
	}
}

// The size rule: no limit of its own, and constant memory whatever the input: scanning never
// allocates, however long or deep.
func TestScanningNeverAllocates(t *testing.T) {
	inputs := map[string][]byte{
		"a long string":          []byte(`"` + strings.Repeat("word ", 1<<18) + `"`),
		"a long escaped string":  []byte(`"` + strings.Repeat(`\u00e9\n`, 1<<16) + `"`),
		"a wide array":           []byte("[" + strings.Repeat(`{"a":[1,"x",null]},`, 1<<14) + "0]"),
		"nesting at the limit":   []byte(nested(`{"k":[`, "]}", MaxDepth/2)),
		"nesting far past it":    []byte(nested("[", "]", 1<<16)),
		"invalid UTF-8":          []byte("\"" + strings.Repeat("\xff", 1<<12) + "\""),
		"an event-sized object":  []byte(`{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"word "}`),
		"truncated in a string":  []byte(`{"a":"` + strings.Repeat("x", 1<<12)),
		"truncated in an object": []byte(`{"a":{"b":[1,2`),
	}
	for name, b := range inputs {
		t.Run(name, func(t *testing.T) {
			n := testing.AllocsPerRun(10, func() {
				_ = Valid(b)
				o := NewObj(b, 0, 0)
				_ = o.Finish()
				a := NewArr(b, 0, 0)
				for _, more := a.Next(); more; _, more = a.Next() {
				}
			})
			if n != 0 {
				t.Errorf("%v allocations", n)
			}
		})
	}
}

func TestObjAndArr(t *testing.T) {
	b := []byte(` { "a" : 1 , "b\u0063" : [ "x" , {"y":null} ] , "d" : "é" } `)
	o := NewObj(b, 0, 0)
	var got []string
	for m, more := o.Next(); more; m, more = o.Next() {
		got = append(got, string(m.Key.Bytes(b))+"="+string(m.Val.Bytes(b)))
		if string(m.Key.Inner(b)) == `b\u0063` {
			if m.Key.F != Escaped {
				t.Errorf("key flags %b", m.Key.F)
			}
			a := NewArr(b, m.Val.S, 1)
			n := 0
			for _, more := a.Next(); more; _, more = a.Next() {
				n++
			}
			if n != 2 || a.Err() != nil || b[a.End()-1] != ']' {
				t.Errorf("array: %d elements, err %v", n, a.Err())
			}
		}
	}
	want := `"a"=1|"b\u0063"=[ "x" , {"y":null} ]|"d"="é"`
	if s := strings.Join(got, "|"); s != want || o.Err() != nil || b[o.End()-1] != '}' {
		t.Errorf("members %s, err %v", s, o.Err())
	}
	for _, bad := range []string{`{"a":1} x`, `{"a":1`, `[1]`, `{"a" 1}`, `{"a":1,}`} {
		o := NewObj([]byte(bad), 0, 0)
		if o.Finish() == nil {
			t.Errorf("Finish accepted %q", bad)
		}
	}
}

func TestAppendUnescaped(t *testing.T) {
	cases := map[string]string{
		`plain`:                   "plain",
		`a\"b\\c\/d\b\f\n\r\t`:    "a\"b\\c/d\b\f\n\r\t",
		`\u00e9\u4e2d`:            "é中",
		`\ud83d\ude42`:            "🙂",
		`\ud83d`:                  "\ufffd",
		`\ude42\ud83d`:            "\ufffd\ufffd",
		`\ud83dx`:                 "\ufffdx",
		"raw \xe2\x98 cut":        "raw \xe2\x98 cut", // kept byte for byte: deltas join back
		`\u0000`:                  "\x00",
		"\xff\\n":                 "\xff\n",
		`\ud83d\u0041`:            "\ufffdA",
		`tail \ud83d\ude42 again`: "tail 🙂 again",
	}
	for in, want := range cases {
		if got := string(AppendUnescaped(nil, []byte(in))); got != want {
			t.Errorf("AppendUnescaped(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestInt(t *testing.T) {
	cases := []struct {
		in       string
		n        int64
		ok, huge bool
	}{
		{"0", 0, true, false}, {"-12", -12, true, false}, {"9007199254740993", 9007199254740993, true, false},
		{"99999999999999999999", 0, true, true}, {"-90071992547409930", 0, true, true},
		{"1.5", 0, false, false}, {"1e3", 0, false, false}, {"", 0, false, false}, {"-", 0, false, false}, {`"1"`, 0, false, false},
	}
	for _, c := range cases {
		n, ok, huge := Int([]byte(c.in))
		if ok != c.ok || huge != c.huge || (!huge && n != c.n) {
			t.Errorf("Int(%q) = %d %v %v", c.in, n, ok, huge)
		}
	}
}

func TestAppendCompact(t *testing.T) {
	in := " {\n \"a b\" : [ 1 , \"x \\\" y\" ] ,\t\"c\":null }\r\n"
	if got := string(AppendCompact(nil, []byte(in))); got != `{"a b":[1,"x \" y"],"c":null}` {
		t.Errorf("got %s", got)
	}
}
