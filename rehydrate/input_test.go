package rehydrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

func TestParseInput(t *testing.T) {
	t.Run("a string is one user message", func(t *testing.T) {
		in := mustInput(t, `"hello \"you\" \u00e9"`)
		if len(in) != 1 || string(in[0].JSON) != `{"type":"message","role":"user","content":"hello \"you\" \u00e9"}` || in[0].Type != "message" {
			t.Errorf("got %v %s", in, in[0].JSON)
		}
	})
	t.Run("an array keeps items as sent", func(t *testing.T) {
		in := mustInput(t, ` [ {"role":"user","content":"a"}, {"type":"item_reference","id":"rs_1"}, {"id":"msg_2"}, {"type":5} ] `)
		if len(in) != 4 || string(in[0].JSON) != `{"role":"user","content":"a"}` || in[1].ID != "rs_1" || in[1].Type != "item_reference" ||
			in[2].ID != "msg_2" || string(in[3].JSON) != `{"type":5}` {
			t.Errorf("got %v", in)
		}
	})
	t.Run("absent", func(t *testing.T) {
		for _, raw := range []string{``, `null`, ` `} {
			if in, err := ParseInput(json.RawMessage(raw)); err != nil || in != nil {
				t.Errorf("%q: %v %v", raw, in, err)
			}
		}
	})
	for _, c := range []struct{ raw, code, param string }{
		{`5`, "invalid_type", "input"},
		{`{"role":"user"}`, "invalid_type", "input"},
		{`[{"role":"user","content":"a"},"text"]`, "invalid_type", "input[1]"},
		{`[{"role":"user","content":"a"},null]`, "invalid_type", "input[1]"},
		{`[{"role":`, "invalid_json", "input"},
		{`"abc`, "invalid_json", "input"},
	} {
		_, err := ParseInput(json.RawMessage(c.raw))
		var ae *wire.APIError
		if !errors.As(err, &ae) {
			t.Errorf("%s: err %v", c.raw, err)
			continue
		}
		checkErr(t, ae, c.code, c.param, "")
	}
}

func TestNormalize(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"easy user message", `{"role":"user","content":"hi"}`,
			`{"type":"message","id":"msg_gen1","role":"user","content":[{"type":"input_text","text":"hi"}],"status":"completed"}`},
		{"easy assistant message keeps extra fields", `{"role":"assistant","content":"ok","phase":"final_answer"}`,
			`{"type":"message","id":"msg_gen1","role":"assistant","content":[{"type":"output_text","text":"ok","annotations":[]}],"phase":"final_answer","status":"completed"}`},
		{"typed message with string content", `{"type":"message","role":"developer","content":"rules","status":"in_progress"}`,
			`{"id":"msg_gen1","type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}],"status":"in_progress"}`},
		{"message with parts and no id or status", `{"type":"message","role":"user","content":[{"type":"input_text","text":"x","x":1}]}`,
			`{"id":"msg_gen1","type":"message","role":"user","content":[{"type":"input_text","text":"x","x":1}],"status":"completed"}`},
		{"null id is replaced", `{"id":null,"type":"function_call","call_id":"c","name":"f","arguments":"{}"}`,
			`{"id":"fc_gen1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}`},
		{"empty id is replaced", `{"type":"function_call_output","id":"","call_id":"c","output":"o"}`,
			`{"id":"fco_gen1","type":"function_call_output","call_id":"c","output":"o"}`},
		{"reasoning keeps everything", `{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}],"encrypted_content":"E","x":{"y":[1]}}`,
			`{"id":"rs_gen1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}],"encrypted_content":"E","x":{"y":[1]}}`},
		{"unknown types are storable", `{"type":"web_search_call","status":"completed"}`,
			`{"id":"item_gen1","type":"web_search_call","status":"completed"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Normalize(mustItem(t, c.in), seqIDs())
			if err != nil {
				t.Fatal(err)
			}
			if string(got.JSON) != c.want {
				t.Errorf("got  %s\nwant %s", got.JSON, c.want)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(got.JSON, &m); err != nil {
				t.Fatal(err)
			}
			if got.ID == "" || string(m["id"]) != `"`+got.ID+`"` || string(m["type"]) != `"`+got.Type+`"` {
				t.Errorf("ID %q Type %q do not match %s", got.ID, got.Type, got.JSON)
			}
		})
	}

	t.Run("a complete item is returned as is", func(t *testing.T) {
		in := mustItem(t, `{"id":"msg_1","type":"message","role":"user","content":[],"status":"completed","x":1}`)
		got, err := Normalize(in, func(string) string { t.Fatal("minted an id"); return "" })
		if err != nil || &got.JSON[0] != &in.JSON[0] || got.ID != "msg_1" || got.Type != "message" {
			t.Errorf("got %v %v", got, err)
		}
	})
	t.Run("errors name the item", func(t *testing.T) {
		for _, c := range []struct{ in, code, param string }{
			{`{"role":"robot","content":"x"}`, "invalid_value", "items[2].role"},
			{`{"role":"user"}`, "missing_required_parameter", "items[2].content"},
			{`{"role":"user","content":{}}`, "invalid_type", "items[2].content"},
			{`{"type":"item_reference","id":"x"}`, "item_reference_not_storable", "items[2]"},
			{`{"content":"x"}`, "missing_required_parameter", "items[2].type"},
		} {
			_, err := NormalizeAt(mustItem(t, c.in), seqIDs(), "items[2]")
			var ae *wire.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("%s: %v", c.in, err)
			}
			checkErr(t, ae, c.code, c.param, "")
		}
		_, err := Normalize(mustItem(t, `{"role":"user"}`), nil)
		var ae *wire.APIError
		if !errors.As(err, &ae) || ae.Param != "input.content" {
			t.Errorf("Normalize error %v", err)
		}
	})
	t.Run("default ids come from wire.NewID", func(t *testing.T) {
		got, err := Normalize(mustItem(t, `{"role":"user","content":"x"}`), nil)
		if err != nil || len(got.ID) != len("msg_")+48 {
			t.Errorf("got %q %v", got.ID, err)
		}
	})
	t.Run("normalised items are stable", func(t *testing.T) {
		once, _ := Normalize(mustItem(t, `{"role":"assistant","content":"x"}`), seqIDs())
		twice, _ := Normalize(once, seqIDs())
		if !bytes.Equal(once.JSON, twice.JSON) {
			t.Errorf("%s != %s", once.JSON, twice.JSON)
		}
	})
}

func TestReferencedIDs(t *testing.T) {
	in := mustInput(t, `[
		{"type":"item_reference","id":"a"},
		{"id":"b"},
		{"type":"item_reference","id":"a"},
		{"role":"user","content":"x","id":"msg_c"},
		{"type":"reasoning","id":"rs_d","summary":[],"encrypted_content":"E"},
		{"type":"reasoning","id":"rs_e","summary":[{"type":"summary_text","text":"s"}]},
		{"type":"reasoning","id":"rs_f","summary":[],"content":[{"type":"reasoning_text","text":"has text"}]},
		{"type":"reasoning","summary":[],"encrypted_content":"no id"},
		{"type":"item_reference"}
	]`)
	got := ReferencedIDs(in)
	if want := []string{"a", "b", "rs_d", "rs_e"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if ReferencedIDs(nil) != nil {
		t.Error("nil input")
	}
}

func TestMapLookup(t *testing.T) {
	m := MapLookup{"x": mustItem(t, `{"id":"x","type":"message","role":"user","content":"a"}`)}
	var l Lookup = m
	if it, ok := l.LookupItem("x"); !ok || it.ID != "x" {
		t.Error("x not found")
	}
	if _, ok := l.LookupItem("y"); ok {
		t.Error("y found")
	}
}

// upperFirst capitalises the item name an error message starts with ("input[0] is …" reads
// "Input[0] is …"), and only a lowercase ASCII letter.
func TestUpperFirstCapitalisesOnlyALeadingLowercaseLetter(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "input[0]": "Input[0]", "a": "A", "z": "Z", "Items": "Items", "`x": "`x", "{x": "{x", "éa": "éa",
	} {
		if got := upperFirst(in); got != want {
			t.Errorf("upperFirst(%q) = %q, want %q", in, got, want)
		}
	}
}

// scanItem refuses input that is not one JSON object, also when it is empty or only whitespace.
func TestScanItemRefusesEmptyInput(t *testing.T) {
	for _, in := range []string{"", "  ", "[]"} {
		if _, _, err := scanItem([]byte(in), nil); err == nil {
			t.Errorf("scanItem(%q) accepted it", in)
		}
	}
}

// scanItem refuses every truncation of a valid item (as an item cut short in storage would be),
// wherever the cut falls: in a key, before a colon, in a content array or between its parts.
func TestScanItemRefusesEveryTruncation(t *testing.T) {
	item := `{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"} , {"type":"input_image","image_url":"u","detail":"low"} ],"output":[ ]}`
	if _, _, err := scanItem([]byte(item), nil); err != nil {
		t.Fatalf("the whole item: %v", err)
	}
	for n := range len(item) {
		if _, _, err := scanItem([]byte(item[:n]), nil); err == nil {
			t.Errorf("scanItem accepted the first %d bytes: %s", n, item[:n])
		}
	}
}

// A sealed reasoning payload that is empty or only whitespace is refused, not read past its end.
func TestScanSealedRefusesAnEmptyPayload(t *testing.T) {
	for _, in := range []string{"", "  "} {
		if _, _, err := scanSealed([]byte(in)); err == nil {
			t.Errorf("scanSealed(%q) accepted it", in)
		}
	}
}

// A function_call_output without a call_id is refused with param naming the member.
func TestFunctionCallOutputWithoutCallIDNamesTheMember(t *testing.T) {
	ae := buildErr(t, &Params{Input: mustInput(t, `[{"type":"function_call_output","output":"x"}]`)})
	if ae.Param != "input[0].call_id" {
		t.Errorf("param %q, want input[0].call_id (%+v)", ae.Param, ae)
	}
}

// A call_id is matched by its value, not its spelling: a function_call_output whose call_id is
// written with JSON escapes answers the call that wrote it plainly, and the other way round.
func TestFunctionCallOutputMatchesItsCallWhateverTheEscapes(t *testing.T) {
	for _, c := range []struct{ call, output string }{
		{`call_1`, `call_\u0031`},
		{`call_\u0031`, `call_1`},
		{`call_\u0031`, `call_\u0031`},
	} {
		in := mustInput(t, `[{"role":"user","content":"q"},`+
			`{"type":"function_call","call_id":"`+c.call+`","name":"f","arguments":"{}"},`+
			`{"type":"function_call_output","call_id":"`+c.output+`","output":"42"}]`)
		got := upstreamInput(t, mustBuild(t, &Params{Input: in}).Body)
		if len(got) != 3 || !strings.Contains(got[2], `"function_call_output"`) {
			t.Fatalf("call %s, output %s: upstream input %v", c.call, c.output, got)
		}
	}
	ae := buildErr(t, &Params{Input: mustInput(t, `[{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},`+
		`{"type":"function_call_output","call_id":"call_\u0032","output":"42"}]`)})
	if ae.Code != CodeOutputWithoutCall {
		t.Fatalf("another id: %+v", ae)
	}
}
