package server

import (
	"encoding/json"
	"net/http"
	"testing"
)

// The query parameters of the read routes, at their bounds: limit 1..100, order asc|desc,
// starting_after ≥ 0, stream true|false; anything else is a 400 naming the parameter.
func TestReadParametersAtTheirBounds(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	code, body := call(t, s, http.MethodPost, "/v1/responses", `{"model":"openai/gpt-oss-sim","input":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`)
	var r struct{ ID string }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil {
		t.Fatalf("%d %s", code, body)
	}
	items := "/v1/responses/" + r.ID + "/input_items"
	for _, tc := range []struct {
		query, param string // param "" means 200
		n            int    // items listed (for a 200)
		first        string // "a" or "b": the first item's text
	}{
		{"?limit=1", "", 1, "b"},
		{"?limit=1&order=asc", "", 1, "a"},
		{"?limit=100&order=desc", "", 2, "b"},
		{"", "", 2, "b"},
		{"?limit=0", "limit", 0, ""},
		{"?limit=101", "limit", 0, ""},
		{"?limit=x", "limit", 0, ""},
		{"?order=up", "order", 0, ""},
	} {
		code, body := call(t, s, http.MethodGet, items+tc.query, "")
		if tc.param != "" {
			if env := envelope(t, body); code != 400 || deref(env.Param) != tc.param {
				t.Errorf("%s: %d %s, want a 400 naming %s", tc.query, code, body, tc.param)
			}
			continue
		}
		var list struct {
			Data []struct {
				Content []struct{ Text string }
			}
			HasMore bool    `json:"has_more"`
			FirstID *string `json:"first_id"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Data) != tc.n ||
			list.Data[0].Content[0].Text != tc.first || list.HasMore != (tc.n < 2) || list.FirstID == nil {
			t.Errorf("%s: %d %s, want %d items from %q", tc.query, code, body, tc.n, tc.first)
		}
	}
	for _, tc := range []struct {
		query string
		code  int
		param string
	}{
		{"?stream=true&starting_after=0", 200, ""},
		{"?stream=false", 200, ""},
		{"?stream=true&starting_after=-1", 400, "starting_after"},
		{"?stream=yes", 400, "stream"},
	} {
		code, body := call(t, s, http.MethodGet, "/v1/responses/"+r.ID+tc.query, "")
		if code != tc.code || tc.param != "" && deref(envelope(t, body).Param) != tc.param {
			t.Errorf("%s: %d %s, want %d %s", tc.query, code, body, tc.code, tc.param)
		}
	}
}
