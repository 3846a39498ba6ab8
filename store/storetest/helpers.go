package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// ItemCounter is an optional capability a backend implements so the suite can check that storage
// per turn is O(that turn's items) (docs/design.md §3). Exercise fails a backend that lacks it.
type ItemCounter interface {
	// ItemCount returns how many item rows the tenant has, whatever references them.
	ItemCount(ctx context.Context, tenant string) (int, error)
}

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// now is the current time at the microsecond precision every backend keeps.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func mustItem(t testing.TB, raw string) wire.Item {
	t.Helper()
	it, err := wire.ParseItem([]byte(raw))
	if err != nil {
		t.Fatalf("parse item %s: %v", raw, err)
	}
	return it
}

// msg is a small user message with the given id and text.
func msg(t testing.TB, id, text string) wire.Item {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"id": id, "type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mustItem(t, string(b))
}

// msgs returns n messages with ids prefix_0 … prefix_{n-1}.
func msgs(t testing.TB, prefix string, n int) []wire.Item {
	t.Helper()
	out := make([]wire.Item, n)
	for i := range out {
		out[i] = msg(t, fmt.Sprintf("%s_%d", prefix, i), fmt.Sprintf("text %s %d", prefix, i))
	}
	return out
}

func newResponse(tenant, id, prev, conv string, status wire.Status) store.Response {
	created := now()
	r := store.Response{
		ID:                 id,
		Tenant:             tenant,
		Status:             status,
		Model:              "test-model",
		PreviousResponseID: prev,
		ConversationID:     conv,
		CreatedAt:          created,
		Echo:               json.RawMessage(`{"model":"test-model","store":true,"metadata":{}}`),
	}
	if status.Terminal() {
		done := created.Add(time.Second)
		r.CompletedAt = &done
		r.Usage = json.RawMessage(`{"input_tokens":3,"output_tokens":5,"total_tokens":8}`)
	}
	return r
}

// commitTurn commits a completed response with the given items.
func commitTurn(t testing.TB, s store.Store, tenant, id, prev, conv string, in, out []wire.Item) {
	t.Helper()
	err := s.ResponseCommit(context.Background(), &store.ResponseCommitParams{
		Response:       newResponse(tenant, id, prev, conv, wire.StatusCompleted),
		Input:          in,
		Output:         out,
		ConversationID: conv,
	})
	if err != nil {
		t.Fatalf("commit %s: %v", id, err)
	}
}

func createConversation(t testing.TB, s store.Store, tenant, id string, items []wire.Item) {
	t.Helper()
	err := s.ConversationCreate(context.Background(), &store.ConversationCreateParams{
		Conversation: store.Conversation{ID: id, Tenant: tenant, CreatedAt: now()},
		Items:        items,
	})
	if err != nil {
		t.Fatalf("create conversation %s: %v", id, err)
	}
}

func isNotFound(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: err = %v, want store.ErrNotFound", what, err)
	}
}

func noErr(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// sameJSON reports whether a and b are equal in meaning and, separately, byte for byte.
func sameJSON(a, b []byte) (meaning, bytesEqual bool) {
	va, errA := wire.DecodeValue(a)
	vb, errB := wire.DecodeValue(b)
	meaning = errA == nil && errB == nil && reflect.DeepEqual(va, vb)
	return meaning, bytes.Equal(a, b)
}

// checkJSON fails unless got equals want in meaning and byte for byte (the store keeps JSON
// verbatim).
func checkJSON(t testing.TB, what string, got, want []byte) {
	t.Helper()
	meaning, exact := sameJSON(got, want)
	switch {
	case !meaning:
		t.Errorf("%s: JSON differs in meaning:\n got %s\nwant %s", what, abbrev(got), abbrev(want))
	case !exact:
		t.Errorf("%s: JSON equal in meaning but not byte for byte:\n got %s\nwant %s", what, abbrev(got), abbrev(want))
	}
}

// checkItems fails unless got and want hold the same items in the same order, verbatim.
func checkItems(t testing.TB, what string, got, want []wire.Item) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d items %v, want %d %v", what, len(got), ids(got), len(want), ids(want))
		return
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Type != want[i].Type {
			t.Errorf("%s: item %d is %s/%s, want %s/%s (order %v, want %v)", what, i, got[i].Type, got[i].ID, want[i].Type, want[i].ID, ids(got), ids(want))
			return
		}
		checkJSON(t, fmt.Sprintf("%s: item %d (%s)", what, i, want[i].ID), got[i].JSON, want[i].JSON)
	}
}

func ids(items []wire.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

func abbrev(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return string(b)
}

func concat(lists ...[]wire.Item) []wire.Item {
	var out []wire.Item
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func checkTime(t testing.TB, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// checkResponse compares a read-back record with what was written.
func checkResponse(t testing.TB, got *store.Response, want store.Response) {
	t.Helper()
	if got == nil {
		t.Fatal("response is nil")
	}
	if got.ID != want.ID || got.Tenant != want.Tenant || got.Status != want.Status || got.Model != want.Model ||
		got.PreviousResponseID != want.PreviousResponseID || got.ConversationID != want.ConversationID ||
		got.Replica != want.Replica || got.ReplicaAway != want.ReplicaAway {
		t.Errorf("response %+v,\nwant %+v", *got, want)
	}
	checkTime(t, "created_at", got.CreatedAt, want.CreatedAt)
	switch {
	case (got.CompletedAt == nil) != (want.CompletedAt == nil):
		t.Errorf("completed_at %v, want %v", got.CompletedAt, want.CompletedAt)
	case got.CompletedAt != nil:
		checkTime(t, "completed_at", *got.CompletedAt, *want.CompletedAt)
	}
	checkRaw(t, "echo", got.Echo, want.Echo)
	checkRaw(t, "usage", got.Usage, want.Usage)
	checkRaw(t, "error", got.Error, want.Error)
	checkRaw(t, "incomplete_details", got.IncompleteDetails, want.IncompleteDetails)
}

// checkRaw compares optional JSON members: nil and JSON null both mean null.
func checkRaw(t testing.TB, what string, got, want json.RawMessage) {
	t.Helper()
	isNull := func(b json.RawMessage) bool { return len(b) == 0 || strings.TrimSpace(string(b)) == "null" }
	if isNull(got) || isNull(want) {
		if isNull(got) != isNull(want) {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
		return
	}
	checkJSON(t, what, got, want)
}

// responsesOf lists a chain's response records, oldest first.
func responsesOf(c *store.Chain) []store.Response {
	out := make([]store.Response, len(c.Turns))
	for i, t := range c.Turns {
		out[i] = t.Response
	}
	return out
}
