package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// The argument guards every backend applies before it touches the database (written once in
// package store, since the backends share them).

func testBeginStatus(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newResponse(tenantA, "resp_default", "", "", "")
	noErr(t, "begin without a status", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: r, LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}))
	got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_default"})
	noErr(t, "get", err)
	if got.Status != wire.StatusInProgress {
		t.Errorf("status %q, want in_progress", got.Status)
	}
	for _, status := range []wire.Status{wire.StatusCompleted, wire.StatusFailed, "bogus"} {
		r := newResponse(tenantA, "resp_bad", "", "", status)
		err := s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: r, LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)})
		if err == nil {
			t.Errorf("begin with status %q: no error", status)
		}
	}
	_, _, err = s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_bad"})
	isNotFound(t, "a rejected begin", err)
}

func testListArguments(t *testing.T, s store.Store) {
	ctx := t.Context()
	commitTurn(t, s, tenantA, "resp_1", "", "", msgs(t, "in", 2), msgs(t, "out", 2))
	createConversation(t, s, tenantA, "conv_1", msgs(t, "c", 2))
	_, err := s.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: "system", Limit: 10})
	if err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown role: %v, want an argument error", err)
	}
	_, err = s.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleInput, Order: "sideways"})
	if err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("response items, unknown order: %v, want an argument error", err)
	}
	_, err = s.ConversationItemList(ctx, &store.ConversationItemListParams{Tenant: tenantA, ConversationID: "conv_1", Order: "sideways"})
	if err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("conversation items, unknown order: %v, want an argument error", err)
	}
}
