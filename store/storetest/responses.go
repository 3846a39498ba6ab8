package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

func testResponseRecord(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newResponse(tenantA, "resp_rec", "", "", wire.StatusIncomplete)
	r.Echo = json.RawMessage(`{"model":"test-model","instructions":"be \"brief\" 🎉","temperature":1.0,"tools":[],"metadata":{"k":"v"},"text":{"format":{"type":"text"}},"x_unknown":null}`)
	r.IncompleteDetails = json.RawMessage(`{"reason":"max_output_tokens"}`)
	r.Usage = json.RawMessage(`{"input_tokens":12345678901234567890,"output_tokens":0}`)
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r}))
	got, out, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_rec"})
	noErr(t, "get", err)
	checkResponse(t, got, r)
	if len(out) != 0 {
		t.Errorf("output %v, want none", ids(out))
	}

	// A begun response reads back in progress, with no completion and no items.
	b := newResponse(tenantA, "resp_begun", "resp_rec", "", wire.StatusInProgress)
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: b, LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Hour)}))
	got, out, err = s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_begun"})
	noErr(t, "get begun", err)
	checkResponse(t, got, b)
	if len(out) != 0 {
		t.Errorf("output of a begun response %v, want none", ids(out))
	}
}

func testCommitWithoutBegin(t *testing.T, s store.Store) {
	in, out := msgs(t, "in", 2), msgs(t, "out", 1)
	commitTurn(t, s, tenantA, "resp_direct", "", "", in, out)
	got, gotOut, err := s.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: tenantA, ID: "resp_direct"})
	noErr(t, "get", err)
	if got.Status != wire.StatusCompleted {
		t.Errorf("status %s, want completed", got.Status)
	}
	checkItems(t, "output", gotOut, out)
}

func testCommitAfterBegin(t *testing.T, s store.Store) {
	ctx := t.Context()
	begun := newResponse(tenantA, "resp_1", "", "", wire.StatusInProgress)
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: begun, LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Hour)}))
	final := newResponse(tenantA, "resp_1", "", "", wire.StatusCompleted)
	final.CreatedAt = begun.CreatedAt
	final.Echo = json.RawMessage(`{"model":"test-model","final":true}`)
	in, out := msgs(t, "in", 2), msgs(t, "out", 2)
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: final, Input: in, Output: out}))

	got, gotOut, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "get", err)
	checkResponse(t, got, final)
	checkItems(t, "output", gotOut, out)
	err = s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: tenantA, ID: "resp_1", LeaseOwner: "w1", LeaseExpiresAt: now().Add(2 * time.Hour)})
	isNotFound(t, "lease extend of a committed response", err)
	// A sweep long after the old lease would have expired leaves the committed response alone.
	n, err := s.ResponseSweep(ctx, &store.ResponseSweepParams{Now: now().Add(24 * time.Hour), Message: "expired"})
	noErr(t, "sweep", err)
	if n != 0 {
		t.Errorf("sweep failed %d responses, want 0", n)
	}
}

func testCommitIdempotent(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	in, out := msgs(t, "in", 2), msgs(t, "out", 2)
	first := newResponse(tenantA, "resp_1", "", "conv_1", wire.StatusCompleted)
	p := &store.ResponseCommitParams{Response: first, Input: in, Output: out, ConversationID: "conv_1"}
	noErr(t, "first commit", s.ResponseCommit(ctx, p))
	noErr(t, "same commit again", s.ResponseCommit(ctx, p))
	// A retry with the same status but other items changes nothing and succeeds.
	same := newResponse(tenantA, "resp_1", "", "conv_1", wire.StatusCompleted)
	noErr(t, "same-status commit with other items", s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: same, Input: msgs(t, "in3", 1), Output: msgs(t, "out3", 2), ConversationID: "conv_1",
	}))
	// One with another status changes nothing and is a conflict.
	other := newResponse(tenantA, "resp_1", "", "conv_1", wire.StatusFailed)
	other.Error = json.RawMessage(`{"code":"server_error","message":"late"}`)
	if err := s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: other, Input: msgs(t, "in2", 1), Output: msgs(t, "out2", 3), ConversationID: "conv_1",
	}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("commit with another status over a terminal response: %v, want ErrConflict", err)
	}

	got, gotOut, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "get", err)
	checkResponse(t, got, first)
	checkItems(t, "output", gotOut, out)
	page, err := s.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleInput, Limit: 100, Order: store.OrderAsc})
	noErr(t, "input items", err)
	checkItems(t, "input", page.Items, in)
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "conversation items", err)
	checkItems(t, "conversation", all, concat(in, out))
	countItems(t, s, tenantA, 4)
}

func testCommitNeedsTerminal(t *testing.T, s store.Store) {
	r := newResponse(tenantA, "resp_1", "", "", wire.StatusInProgress)
	err := s.ResponseCommit(t.Context(), &store.ResponseCommitParams{Response: r, Output: msgs(t, "out", 1)})
	if err == nil {
		t.Fatal("commit of an in_progress response succeeded, want an error")
	}
	_, _, err = s.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	isNotFound(t, "get after rejected commit", err)
}

func testCommitAtomic(t *testing.T, s store.Store) {
	ctx := t.Context()
	err := s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response:       newResponse(tenantA, "resp_1", "", "conv_none", wire.StatusCompleted),
		Input:          msgs(t, "in", 2),
		Output:         msgs(t, "out", 1),
		ConversationID: "conv_none",
	})
	isNotFound(t, "commit into an unknown conversation", err)
	_, _, err = s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	isNotFound(t, "response after failed commit", err)
	_, err = s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: "in_0"})
	isNotFound(t, "item after failed commit", err)
	countItems(t, s, tenantA, 0)

	// A begun response stays in progress when its commit fails.
	b := newResponse(tenantA, "resp_2", "", "conv_none", wire.StatusInProgress)
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: b, LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}))
	err = s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: newResponse(tenantA, "resp_2", "", "conv_none", wire.StatusCompleted), Output: msgs(t, "out", 1), ConversationID: "conv_none",
	})
	isNotFound(t, "commit of begun response into an unknown conversation", err)
	got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "get", err)
	if got.Status != wire.StatusInProgress {
		t.Errorf("status after failed commit %s, want in_progress", got.Status)
	}
	countItems(t, s, tenantA, 0)
}

func testBeginConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	p := &store.ResponseBeginParams{Response: newResponse(tenantA, "resp_1", "", "", wire.StatusInProgress), LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}
	noErr(t, "begin", s.ResponseBegin(ctx, p))
	if err := s.ResponseBegin(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second begin: %v, want ErrConflict", err)
	}
	commitTurn(t, s, tenantA, "resp_2", "", "", nil, msgs(t, "out", 1))
	p.Response.ID = "resp_2"
	if err := s.ResponseBegin(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Errorf("begin of a committed id: %v, want ErrConflict", err)
	}
	// queued is a valid starting status too.
	q := newResponse(tenantA, "resp_3", "", "", wire.StatusQueued)
	noErr(t, "begin queued", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: q, LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}))
	got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_3"})
	noErr(t, "get queued", err)
	checkResponse(t, got, q)
}

func testLeaseExtend(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newResponse(tenantA, "resp_1", "", "", wire.StatusInProgress)
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: r, LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Second)}))
	noErr(t, "extend by owner", s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: tenantA, ID: "resp_1", LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Hour)}))
	isNotFound(t, "extend by another owner", s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: tenantA, ID: "resp_1", LeaseOwner: "w2", LeaseExpiresAt: now().Add(time.Hour)}))
	isNotFound(t, "extend of unknown", s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: tenantA, ID: "resp_x", LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Hour)}))
	// The extension holds: a sweep a minute from now spares it.
	n, err := s.ResponseSweep(ctx, &store.ResponseSweepParams{Now: now().Add(time.Minute), Message: "expired"})
	noErr(t, "sweep", err)
	if n != 0 {
		t.Errorf("sweep after extension failed %d, want 0", n)
	}
}

func testSweep(t *testing.T, s store.Store) {
	ctx := t.Context()
	past, future := now().Add(-time.Second), now().Add(time.Hour)
	begin := func(tenant, id string, status wire.Status, exp time.Time) {
		t.Helper()
		noErr(t, "begin "+id, s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: newResponse(tenant, id, "", "", status), LeaseOwner: "w1", LeaseExpiresAt: exp}))
	}
	begin(tenantA, "resp_expired", wire.StatusInProgress, past)
	begin(tenantB, "resp_expired_b", wire.StatusInProgress, past)
	begin(tenantA, "resp_queued_expired", wire.StatusQueued, past)
	begin(tenantA, "resp_live", wire.StatusInProgress, future)
	commitTurn(t, s, tenantA, "resp_done", "", "", nil, msgs(t, "out", 1))

	n, err := s.ResponseSweep(ctx, &store.ResponseSweepParams{Now: now(), Message: "lease expired"})
	noErr(t, "sweep", err)
	if n != 3 {
		t.Errorf("sweep count %d, want 3", n)
	}
	for _, r := range []struct{ tenant, id string }{{tenantA, "resp_expired"}, {tenantB, "resp_expired_b"}, {tenantA, "resp_queued_expired"}} {
		got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: r.tenant, ID: r.id})
		noErr(t, "get "+r.id, err)
		if got.Status != wire.StatusFailed || got.CompletedAt != nil {
			t.Errorf("%s: status %s completed_at %v, want failed and no completed_at", r.id, got.Status, got.CompletedAt)
		}
		want := map[string]any{"code": "server_error", "message": "lease expired"}
		var e map[string]any
		if err := json.Unmarshal(got.Error, &e); err != nil || fmt.Sprint(e) != fmt.Sprint(want) {
			t.Errorf("%s: error %s, want %v", r.id, got.Error, want)
		}
	}
	for _, id := range []string{"resp_live", "resp_done"} {
		got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: id})
		noErr(t, "get "+id, err)
		if got.Status == wire.StatusFailed || got.Error != nil {
			t.Errorf("%s: swept (status %s, error %s)", id, got.Status, got.Error)
		}
	}
	isNotFound(t, "extend after sweep", s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: tenantA, ID: "resp_expired", LeaseOwner: "w1", LeaseExpiresAt: future}))
	// A late commit of a swept response is a conflict that changes nothing: it stays failed.
	if err := s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: newResponse(tenantA, "resp_expired", "", "", wire.StatusCompleted), Output: msgs(t, "out_late", 1)}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("late commit of a swept response: %v, want ErrConflict", err)
	}
	got, out, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_expired"})
	noErr(t, "get after late commit", err)
	if got.Status != wire.StatusFailed || len(out) != 0 {
		t.Errorf("after late commit: status %s, output %v; want failed, none", got.Status, ids(out))
	}
	n, err = s.ResponseSweep(ctx, &store.ResponseSweepParams{Now: now(), Message: "lease expired"})
	noErr(t, "second sweep", err)
	if n != 0 {
		t.Errorf("second sweep count %d, want 0", n)
	}
}
