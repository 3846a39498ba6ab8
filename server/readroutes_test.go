package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// A conversation keeps the metadata it was created or updated with ({} when none was sent);
// metadata that is not a map of strings is a 400 naming it, and changes nothing.
func TestConversationMetadataIsKeptAndBadMetadataIs400(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	metadataOf := func(body string) (string, string) {
		var v struct {
			ID       string
			Metadata json.RawMessage
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return v.ID, string(v.Metadata)
	}
	code, body := call(t, s, http.MethodPost, "/v1/conversations", `{}`)
	if _, md := metadataOf(body); code != http.StatusOK || md != `{}` {
		t.Fatalf("create without metadata: %d %s, want metadata {}", code, body)
	}
	code, body = call(t, s, http.MethodPost, "/v1/conversations", `{"metadata":{"topic":"tides"}}`)
	id, md := metadataOf(body)
	if code != http.StatusOK || md != `{"topic":"tides"}` {
		t.Fatalf("create with metadata: %d %s", code, body)
	}
	for _, bad := range []string{`{"metadata":{"n":1}}`, `{"metadata":"tides"}`} {
		if code, body := call(t, s, http.MethodPost, "/v1/conversations", bad); code != http.StatusBadRequest || !strings.HasPrefix(deref(envelope(t, body).Param), "metadata") {
			t.Fatalf("create with %s: %d %s, want a 400 naming metadata", bad, code, body)
		}
		if code, body := call(t, s, http.MethodPost, "/v1/conversations/"+id, bad); code != http.StatusBadRequest || !strings.HasPrefix(deref(envelope(t, body).Param), "metadata") {
			t.Fatalf("update with %s: %d %s, want a 400 naming metadata", bad, code, body)
		}
	}
	code, body = call(t, s, http.MethodPost, "/v1/conversations/"+id, `{"metadata":{"topic":"currents"}}`)
	if _, md := metadataOf(body); code != http.StatusOK || md != `{"topic":"currents"}` {
		t.Fatalf("update: %d %s", code, body)
	}
	if _, body := call(t, s, http.MethodGet, "/v1/conversations/"+id, ""); !strings.Contains(body, `"metadata":{"topic":"currents"}`) {
		t.Fatalf("read back after a refused and an accepted update: %s", body)
	}
}

// DELETE of a stored response answers the deletion object; the response is gone after it, and a
// second DELETE is a 404.
func TestDeleteResponseAnswersTheDeletionAndForgetsIt(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	code, body := call(t, s, http.MethodPost, "/v1/responses", syncBody)
	var r struct{ ID string }
	if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	code, body = call(t, s, http.MethodDelete, "/v1/responses/"+r.ID, "")
	if code != http.StatusOK || !jsonEqual([]byte(body), []byte(`{"id":"`+r.ID+`","object":"response.deleted","deleted":true}`)) {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, body := call(t, s, http.MethodGet, "/v1/responses/"+r.ID, ""); code != http.StatusNotFound {
		t.Fatalf("GET after delete: %d %s", code, body)
	}
	if code, body := call(t, s, http.MethodDelete, "/v1/responses/"+r.ID, ""); code != http.StatusNotFound {
		t.Fatalf("second delete: %d %s", code, body)
	}
}

// A page starts after the item `after` names, wherever it stands in the list (first, middle,
// last), in the page's order; an id the list does not hold is a 400 naming after.
func TestPaginateStartsAfterTheNamedItemAtEveryPosition(t *testing.T) {
	items := []wire.Item{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	ids := func(p *store.ItemPage) []string {
		var out []string
		for _, it := range p.Items {
			out = append(out, it.ID)
		}
		return out
	}
	for _, tc := range []struct {
		after   string
		order   store.Order
		limit   int
		want    []string
		hasMore bool
	}{
		{"", store.OrderAsc, 10, []string{"a", "b", "c"}, false},
		{"a", store.OrderAsc, 10, []string{"b", "c"}, false},
		{"b", store.OrderAsc, 10, []string{"c"}, false},
		{"c", store.OrderAsc, 10, nil, false},
		{"c", store.OrderDesc, 10, []string{"b", "a"}, false},
		{"a", store.OrderDesc, 10, nil, false},
		{"", store.OrderAsc, 2, []string{"a", "b"}, true},
		{"a", store.OrderAsc, 2, []string{"b", "c"}, false},
	} {
		p, err := paginate(items, pageQuery{after: tc.after, limit: tc.limit, order: tc.order})
		if err != nil || !slices.Equal(ids(p), tc.want) || p.HasMore != tc.hasMore {
			t.Fatalf("after %q %s limit %d: %v has_more %v (%v), want %v has_more %v", tc.after, tc.order, tc.limit, ids(p), p != nil && p.HasMore, err, tc.want, tc.hasMore)
		}
	}
	_, err := paginate(items, pageQuery{after: "x", limit: 10, order: store.OrderAsc})
	var e *wire.APIError
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || deref(e.Body().Param) != "after" {
		t.Fatalf("after an unknown id: %v, want a 400 naming after", err)
	}
}

// GET /v1/models/{id} (the SDKs' models.retrieve) answers the upstream list's entry, ids with
// slashes included, escaped or not; an id the list lacks is 404 model_not_found.
func TestRetrieveModelAnswersTheListEntryOr404(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	for _, path := range []string{"/v1/models/openai/gpt-oss-sim", "/v1/models/openai%2Fgpt-oss-sim"} {
		code, body := call(t, s, http.MethodGet, path, "")
		var m struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			MaxModelLen int    `json:"max_model_len"`
		}
		if err := json.Unmarshal([]byte(body), &m); err != nil || code != http.StatusOK || m.ID != "openai/gpt-oss-sim" || m.Object != "model" || m.MaxModelLen == 0 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	code, body := call(t, s, http.MethodGet, "/v1/models/nobody/serves-this", "")
	if e := envelope(t, body); code != http.StatusNotFound || deref(e.Code) != "model_not_found" || deref(e.Param) != "model" {
		t.Fatalf("unknown model: %d %s", code, body)
	}
}
