package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

func testResponseDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	in1, out1 := msgs(t, "in1", 1), msgs(t, "out1", 1)
	commitTurn(t, s, tenantA, "resp_1", "", "conv_1", in1, out1)
	in2, out2 := msgs(t, "in2", 1), msgs(t, "out2", 1)
	commitTurn(t, s, tenantA, "resp_2", "resp_1", "", in2, out2)
	direct := msgs(t, "d", 1)
	noErr(t, "append", s.ConversationItemAppend(ctx, &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: "conv_1", Items: direct}))

	noErr(t, "delete resp_1", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_1"}))
	_, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	isNotFound(t, "get deleted", err)
	_, err = s.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleInput, Limit: 10, Order: store.OrderAsc})
	isNotFound(t, "items of deleted", err)
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "conversation", err)
	checkItems(t, "conversation keeps the deleted response's items", all, concat(in1, out1, direct))
	chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "chain", err)
	if chain.Missing != "resp_1" {
		t.Errorf("missing %q, want resp_1", chain.Missing)
	}
	checkItems(t, "chain after delete", chain.Items(), concat(in2, out2))

	noErr(t, "delete resp_2", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_2"}))
	_, err = s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: "in2_0"})
	isNotFound(t, "item of a deleted response", err)
	isNotFound(t, "delete again", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_2"}))
	countItems(t, s, tenantA, 3)

	// Once the conversation goes too, nothing is left.
	noErr(t, "delete conversation", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1"}))
	countItems(t, s, tenantA, 0)
}

func testConversationDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed := msgs(t, "seed", 2)
	createConversation(t, s, tenantA, "conv_1", seed)
	in, out := msgs(t, "in", 1), msgs(t, "out", 1)
	commitTurn(t, s, tenantA, "resp_1", "", "conv_1", in, out)
	// A turn lease that has expired does not keep the conversation alive.
	noErr(t, "acquire", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_2", ExpiresAt: now().Add(-time.Millisecond)}))

	noErr(t, "delete", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1", Now: now()}))
	_, err := s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: tenantA, ID: "conv_1"})
	isNotFound(t, "get deleted", err)
	_, err = s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	isNotFound(t, "items of deleted", err)
	_, err = s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: "seed_0"})
	isNotFound(t, "item created in the conversation", err)
	_, gotOut, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "response survives", err)
	checkItems(t, "response output", gotOut, out)
	page, err := s.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleInput, Limit: 10, Order: store.OrderAsc})
	noErr(t, "response input", err)
	checkItems(t, "response input", page.Items, in)
	countItems(t, s, tenantA, 2)
	isNotFound(t, "delete again", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1"}))

	// The id is free again.
	createConversation(t, s, tenantA, "conv_1", nil)
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "items of recreated", err)
	if len(all) != 0 {
		t.Errorf("recreated conversation lists %v", ids(all))
	}
}

func testTenantIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Tenant A's state.
	meta := json.RawMessage(`{"owner":"a"}`)
	noErr(t, "create", s.ConversationCreate(ctx, &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_a", Tenant: tenantA, CreatedAt: now(), Metadata: meta}, Items: msgs(t, "seed", 1)}))
	in, out := msgs(t, "in", 2), msgs(t, "out", 2)
	commitTurn(t, s, tenantA, "resp_a1", "", "conv_a", in, out)
	commitTurn(t, s, tenantA, "resp_a2", "resp_a1", "", msgs(t, "in2", 1), msgs(t, "out2", 1))
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: newResponse(tenantA, "resp_a3", "", "", wire.StatusInProgress), LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}))
	later := now().Add(time.Hour)
	noErr(t, "acquire", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_a", ResponseID: "resp_a3", ExpiresAt: later}))

	// Tenant B sees none of it and can change none of it.
	b := tenantB
	_, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: b, ID: "resp_a1"})
	isNotFound(t, "ResponseGet", err)
	_, err = s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: b, ID: "resp_a2"})
	isNotFound(t, "ResponseChainGet", err)
	_, err = s.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: b, ResponseID: "resp_a1", Role: store.RoleInput, Limit: 10, Order: store.OrderAsc})
	isNotFound(t, "ItemListByResponse", err)
	_, err = s.ItemGet(ctx, &store.ItemGetParams{Tenant: b, ID: "in_0"})
	isNotFound(t, "ItemGet", err)
	_, err = s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: b, ID: "conv_a"})
	isNotFound(t, "ConversationGet", err)
	_, err = s.ConversationUpdate(ctx, &store.ConversationUpdateParams{Tenant: b, ID: "conv_a", Metadata: json.RawMessage(`{"owner":"b"}`)})
	isNotFound(t, "ConversationUpdate", err)
	_, err = s.ConversationItemList(ctx, &store.ConversationItemListParams{Tenant: b, ConversationID: "conv_a", Limit: 10, Order: store.OrderAsc})
	isNotFound(t, "ConversationItemList", err)
	_, err = s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: b, ConversationID: "conv_a"})
	isNotFound(t, "ConversationItemsAll", err)
	_, err = s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: b, ConversationID: "conv_a", ItemID: "in_0"})
	isNotFound(t, "ConversationItemGet", err)
	isNotFound(t, "ConversationItemAppend", s.ConversationItemAppend(ctx, &store.ConversationItemAppendParams{Tenant: b, ConversationID: "conv_a", Items: msgs(t, "evil", 1)}))
	isNotFound(t, "ConversationItemDelete", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: b, ConversationID: "conv_a", ItemID: "in_0"}))
	isNotFound(t, "ConversationTurnAcquire", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: b, ConversationID: "conv_a", ResponseID: "resp_b", ExpiresAt: later}))
	noErr(t, "ConversationTurnRelease", s.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{Tenant: b, ConversationID: "conv_a", ResponseID: "resp_a3"}))
	isNotFound(t, "ResponseLeaseExtend", s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: b, ID: "resp_a3", LeaseOwner: "w", LeaseExpiresAt: later}))
	isNotFound(t, "ResponseDelete", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: b, ID: "resp_a1"}))
	isNotFound(t, "ConversationDelete", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: b, ID: "conv_a"}))
	isNotFound(t, "ResponseCommit into A's conversation", s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: newResponse(b, "resp_b1", "", "conv_a", wire.StatusCompleted), Output: msgs(t, "evil", 1), ConversationID: "conv_a",
	}))
	// B's chain through A's response id stops at the tenant boundary, as at a deleted ancestor.
	commitTurn(t, s, b, "resp_b2", "resp_a2", "", msgs(t, "bin", 1), msgs(t, "bout", 1))
	chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: b, ID: "resp_b2"})
	noErr(t, "B's chain", err)
	if chain.Missing != "resp_a2" || len(responsesOf(chain)) != 1 || len(chain.Items()) != 2 {
		t.Errorf("B's chain: missing %q, %d responses, %d items; want resp_a2, 1, 2", chain.Missing, len(responsesOf(chain)), len(chain.Items()))
	}
	// An id A uses is as free for B as an unknown one: B may create its own.
	noErr(t, "B's begin of A's response id", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: newResponse(b, "resp_a1", "", "", wire.StatusInProgress), LeaseOwner: "wb", LeaseExpiresAt: later}))
	noErr(t, "B's conversation with A's id", s.ConversationCreate(ctx, &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_a", Tenant: b, CreatedAt: now()}}))
	noErr(t, "B deletes its own", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: b, ID: "conv_a"}))
	noErr(t, "B deletes its own", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: b, ID: "resp_a1", Now: later.Add(time.Minute)}))

	// A's state is intact.
	r, gotOut, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_a1"})
	noErr(t, "A's response", err)
	if r.Status != wire.StatusCompleted {
		t.Errorf("A's response status %s", r.Status)
	}
	checkItems(t, "A's output", gotOut, out)
	chain, err = s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_a2"})
	noErr(t, "A's chain", err)
	if chain.Missing != "" || len(chain.Items()) != 6 {
		t.Errorf("A's chain: missing %q, %d items", chain.Missing, len(chain.Items()))
	}
	c, err := s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: tenantA, ID: "conv_a"})
	noErr(t, "A's conversation", err)
	checkJSON(t, "A's metadata", c.Metadata, meta)
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_a"})
	noErr(t, "A's conversation items", err)
	checkItems(t, "A's conversation items", all, concat(msgs(t, "seed", 1), in, out))
	if err := s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_a", ResponseID: "resp_other", ExpiresAt: later}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("A's lease after B's release: %v, want ErrConflict (still held)", err)
	}
	noErr(t, "A's lease extend", s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: tenantA, ID: "resp_a3", LeaseOwner: "w", LeaseExpiresAt: later}))
	countItems(t, s, tenantA, 1+4+2)
	countItems(t, s, b, 2)
}

func testSecret(t *testing.T, s store.Store) {
	ctx := t.Context()
	const callers = 20
	vals := make([][]byte, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			vals[i], errs[i] = s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "hmac", Generate: func() ([]byte, error) {
				return []byte(fmt.Sprintf("secret-%d-\x00\xff", i)), nil
			}})
		})
	}
	wg.Wait()
	for i := range callers {
		noErr(t, fmt.Sprintf("caller %d", i), errs[i])
		if string(vals[i]) != string(vals[0]) {
			t.Fatalf("caller %d got %q, caller 0 got %q", i, vals[i], vals[0])
		}
	}
	// Afterwards the stored value wins and Generate is not called.
	v, err := s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "hmac", Generate: func() ([]byte, error) {
		return nil, errors.New("must not be called")
	}})
	noErr(t, "get existing", err)
	if string(v) != string(vals[0]) {
		t.Errorf("existing secret %q, want %q", v, vals[0])
	}
	// A failing Generate is reported and stores nothing.
	boom := errors.New("no entropy")
	if _, err := s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "other", Generate: func() ([]byte, error) { return nil, boom }}); !errors.Is(err, boom) {
		t.Errorf("failing generate: %v, want %v", err, boom)
	}
	v, err = s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "other", Generate: func() ([]byte, error) { return []byte("x"), nil }})
	noErr(t, "other", err)
	if string(v) != "x" {
		t.Errorf("other secret %q, want x", v)
	}
}

func testSealKeySecret(t *testing.T, s store.Store) {
	ctx := t.Context()
	key := make([]byte, 256) // every byte value, NUL and invalid UTF-8 included
	for i := range key {
		key[i] = byte(i)
	}
	hmacKey, err := s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: store.SecretTenantHMAC,
		Generate: func() ([]byte, error) { return []byte("hmac"), nil }})
	noErr(t, "tenant secret", err)
	got, err := s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: store.SecretSealKey,
		Generate: func() ([]byte, error) { return key, nil }})
	noErr(t, "seal key", err)
	if !bytes.Equal(got, key) {
		t.Fatalf("seal key came back as %x", got)
	}
	// A second replica starting later reads the same key (its own Generate is not used), and the
	// tenant secret is untouched.
	again, err := s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: store.SecretSealKey,
		Generate: func() ([]byte, error) { return []byte("another replica's key"), nil }})
	noErr(t, "seal key again", err)
	h2, err := s.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: store.SecretTenantHMAC,
		Generate: func() ([]byte, error) { return []byte("other"), nil }})
	noErr(t, "tenant secret again", err)
	if !bytes.Equal(again, key) || !bytes.Equal(h2, hmacKey) {
		t.Fatalf("second reader: seal key %x, tenant secret %q", again, h2)
	}
}

func testPurge(t *testing.T, s store.Store) {
	ctx := t.Context()
	old := now().Add(-48 * time.Hour)
	commitAt := func(tenant, id, conv string, created time.Time, out []wire.Item) {
		t.Helper()
		r := newResponse(tenant, id, "", conv, wire.StatusCompleted)
		r.CreatedAt = created
		noErr(t, "commit "+id, s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r, Output: out, ConversationID: conv}))
	}
	createConversation(t, s, tenantA, "conv_keep", nil)
	commitAt(tenantA, "resp_old_a", "", old, msgs(t, "oa", 2))
	commitAt(tenantB, "resp_old_b", "", old.Add(time.Minute), msgs(t, "ob", 1))
	commitAt(tenantA, "resp_old_conv", "conv_keep", old.Add(2*time.Minute), msgs(t, "oc", 2))
	commitAt(tenantA, "resp_new", "", now(), msgs(t, "nw", 1))
	running := newResponse(tenantA, "resp_old_running", "", "", wire.StatusInProgress)
	running.CreatedAt = old
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: running, LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}))

	n, err := s.ResponsePurge(ctx, &store.ResponsePurgeParams{Before: now().Add(-time.Hour), Limit: 2})
	noErr(t, "purge", err)
	if n != 2 {
		t.Fatalf("first purge deleted %d, want 2 (the limit, oldest first)", n)
	}
	n, err = s.ResponsePurge(ctx, &store.ResponsePurgeParams{Before: now().Add(-time.Hour), Limit: 100})
	noErr(t, "purge again", err)
	if n != 1 {
		t.Fatalf("second purge deleted %d, want 1", n)
	}
	for _, r := range []struct{ tenant, id string }{{tenantA, "resp_old_a"}, {tenantB, "resp_old_b"}, {tenantA, "resp_old_conv"}} {
		_, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: r.tenant, ID: r.id})
		isNotFound(t, "get purged "+r.id, err)
	}
	for _, id := range []string{"resp_new", "resp_old_running"} {
		_, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: id})
		noErr(t, "get kept "+id, err)
	}
	items, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_keep"})
	noErr(t, "conversation items", err)
	if len(items) != 2 {
		t.Fatalf("the conversation lost items of a purged response: %d left, want 2", len(items))
	}
	// The purged responses' other items are gone: A keeps resp_new's and the listed ones.
	countItems(t, s, tenantA, 1+2)
	countItems(t, s, tenantB, 0)
}
