package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

func TestBodiesWithNULInvalidUTF8LoneSurrogatesOrDeepNestingAre400NamingTheParam(t *testing.T) {
	s, upstreamCalls := newIntakeServer(t, Config{MaxJSONDepth: 8})
	create := func(members string) string { return `{"model":"m","input":"hi",` + members + `}` }
	nested := `{"format":{"type":"json_schema","schema":{"a":{"b":{"c":{"d":{"e":{"f":1}}}}}}}}`
	for _, tc := range []struct {
		name, target, body, param, code string
	}{
		{"NUL escape in metadata", "/v1/responses", create(`"metadata":{"key":"a\u0000b"}`), "metadata.key", "invalid_value"},
		{"invalid UTF-8 in metadata", "/v1/responses", create("\"metadata\":{\"key\":\"a\xffb\"}"), "metadata.key", "invalid_value"},
		{"invalid UTF-8 in instructions", "/v1/responses", create("\"instructions\":\"\xc3\x28\""), "instructions", "invalid_value"},
		{"lone surrogate in text", "/v1/responses", create(`"text":{"format":{"type":"text"},"verbosity":"\ud800"}`), "text.verbosity", "invalid_value"},
		{"NUL in previous_response_id", "/v1/responses", create(`"previous_response_id":"resp_\u0000"`), "previous_response_id", "invalid_value"},
		{"NUL in conversation", "/v1/responses", create(`"conversation":{"id":"conv_\u0000"}`), "conversation.id", "invalid_value"},
		{"NUL in an input item id", "/v1/responses", `{"model":"m","input":[{"type":"message","role":"user","id":"msg_\u0000","content":"x"}]}`, "input[0].id", "invalid_value"},
		{"NUL in an item_reference", "/v1/responses", `{"model":"m","input":[{"type":"item_reference","id":"x\u0000"}]}`, "input[0].id", "invalid_value"},
		{"invalid UTF-8 in input text", "/v1/responses", "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"ok\"},{\"type\":\"input_text\",\"text\":\"\xed\xa0\x80\"}]}]}", "input[0].content[1].text", "invalid_value"},
		{"NUL in a member name", "/v1/responses", create(`"metadata":{"k\u0000":"v"}`), "metadata.k\x00", "invalid_value"},
		{"raw NUL in a string", "/v1/responses", create("\"instructions\":\"a\x00\""), "instructions", "invalid_json"},
		{"deep text", "/v1/responses", create(`"text":` + nested), "text.format.schema.a.b.c.d.e", "nesting_too_deep"},
		{"deep tools", "/v1/responses", create(`"tools":[[[[[[[[[]]]]]]]]]`), "tools[0][0][0][0][0][0][0]", "nesting_too_deep"},
		{"syntax error at an array element", "/v1/responses", `{"model":"m","input":[{"a":[1,x]}]}`, "input[0].a[1]", "invalid_json"},
		{"conversation create", "/v1/conversations", `{"metadata":{"key":"\u0000"}}`, "metadata.key", "invalid_value"},
		{"conversation create items", "/v1/conversations", `{"items":[{"type":"message","role":"user","content":"\ud800x"}]}`, "items[0].content", "invalid_value"},
		{"conversation update", "/v1/conversations/conv_1", "{\"metadata\":{\"key\":\"\xff\"}}", "metadata.key", "invalid_value"},
		{"conversation items", "/v1/conversations/conv_1/items", `{"items":[{"type":"message","role":"user","id":"m\u0000","content":"x"}]}`, "items[0].id", "invalid_value"},
		{"deep conversation items", "/v1/conversations/conv_1/items", `{"items":[{"content":[[[[[[[[]]]]]]]]}]}`, "items[0].content[0][0][0][0][0]", "nesting_too_deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, e := do(t, s, http.MethodPost, tc.target, tc.body)
			if rec.Code != http.StatusBadRequest || e.Type != wire.ErrInvalidRequest || deref(e.Param) != tc.param || deref(e.Code) != tc.code {
				t.Fatalf("got %d %s, want 400 param %q code %q", rec.Code, rec.Body, tc.param, tc.code)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("the envelope is not valid JSON: %q", rec.Body)
			}
		})
	}
	if n := upstreamCalls.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

// A body that is not an object, the empty body included, is answered that it must be one (not
// with the decoder's end-of-input error).
func TestABodyThatIsNotAnObjectIsAnsweredSo(t *testing.T) {
	s, _ := newIntakeServer(t, Config{})
	for _, body := range []string{"", "  ", "[1]", `"text"`, "7"} {
		rec, e := do(t, s, http.MethodPost, "/v1/responses", body)
		if rec.Code != http.StatusBadRequest || e.Message != "The request body must be a JSON object." || deref(e.Code) != "invalid_json" {
			t.Fatalf("body %q: %d %s", body, rec.Code, rec.Body)
		}
	}
}

func TestBodiesThatAreFineStillDecode(t *testing.T) {
	// A surrogate pair, an escaped backslash before u0000, non-ASCII text, duplicate names (the
	// last wins, as with encoding/json) and nesting at the limit.
	body := `{"model":"m","input":"\ud83d\ude00 caf\u00e9 ` + "日本" + ` \\u0000","metadata":{"k":"1","k":"2"},"text":{"format":{"type":"json_schema","name":"n","schema":{"a":{"b":{"c":{}}}}}}}`
	r, err := decodeCreate([]byte(body), 7)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.body.Metadata) != `{"k":"1","k":"2"}` || !strings.HasPrefix(string(r.Input), `"\ud83d`) {
		t.Fatalf("members: %q %q", r.body.Metadata, r.Input)
	}
	if _, err := decodeCreate([]byte(body), 6); err == nil {
		t.Fatalf("depth 7 accepted under a limit of 6")
	}
}

func TestPathIDsThatNoBackendCanStoreAre400NamingTheParam(t *testing.T) {
	s, _ := newIntakeServer(t, Config{})
	for _, tc := range []struct{ method, target, param string }{
		{http.MethodGet, "/v1/responses/resp_%00", "response_id"},
		{http.MethodGet, "/v1/responses/resp_%FF", "response_id"},
		{http.MethodDelete, "/v1/responses/resp_%01x", "response_id"},
		{http.MethodGet, "/v1/responses/resp_%00/input_items", "response_id"},
		{http.MethodPost, "/v1/responses/%C3%28/cancel", "response_id"},
		{http.MethodGet, "/v1/conversations/conv_%00", "conversation_id"},
		{http.MethodPost, "/v1/conversations/conv_%FF", "conversation_id"},
		{http.MethodDelete, "/v1/conversations/conv_%00", "conversation_id"},
		{http.MethodGet, "/v1/conversations/conv_%FF/items", "conversation_id"},
		{http.MethodPost, "/v1/conversations/conv_%00/items", "conversation_id"},
		{http.MethodGet, "/v1/conversations/conv_1/items/msg_%00", "item_id"},
		{http.MethodDelete, "/v1/conversations/conv_1/items/msg_%FF", "item_id"},
		{http.MethodGet, "/v1/responses/resp_1/input_items?after=msg_%00", "after"},
		{http.MethodGet, "/v1/conversations/conv_1/items?after=%FF", "after"},
	} {
		rec, e := do(t, s, tc.method, tc.target, "")
		if rec.Code != http.StatusBadRequest || deref(e.Param) != tc.param || deref(e.Code) != "invalid_value" {
			t.Errorf("%s %s: got %d %s, want 400 param %q", tc.method, tc.target, rec.Code, rec.Body, tc.param)
		}
	}
}
