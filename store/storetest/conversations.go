package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

func testConversationMetadata(t *testing.T, s store.Store) {
	ctx := t.Context()
	created := now()
	noErr(t, "create without metadata", s.ConversationCreate(ctx, &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_1", Tenant: tenantA, CreatedAt: created}}))
	c, err := s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: tenantA, ID: "conv_1"})
	noErr(t, "get", err)
	if c.ID != "conv_1" || c.Tenant != tenantA {
		t.Errorf("conversation %+v", c)
	}
	checkTime(t, "created_at", c.CreatedAt, created)
	checkJSON(t, "empty metadata", c.Metadata, []byte(`{}`))

	meta := json.RawMessage(`{"topic":"é 🎉","n":"1.0"}`)
	noErr(t, "create with metadata", s.ConversationCreate(ctx, &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_2", Tenant: tenantA, CreatedAt: created, Metadata: meta}}))
	c, err = s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: tenantA, ID: "conv_2"})
	noErr(t, "get", err)
	checkJSON(t, "metadata", c.Metadata, meta)

	upd := json.RawMessage(`{"a":"b"}`)
	c, err = s.ConversationUpdate(ctx, &store.ConversationUpdateParams{Tenant: tenantA, ID: "conv_2", Metadata: upd})
	noErr(t, "update", err)
	checkJSON(t, "updated metadata (returned)", c.Metadata, upd)
	checkTime(t, "created_at after update", c.CreatedAt, created)
	c, err = s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: tenantA, ID: "conv_2"})
	noErr(t, "get", err)
	checkJSON(t, "updated metadata (read)", c.Metadata, upd)

	c, err = s.ConversationUpdate(ctx, &store.ConversationUpdateParams{Tenant: tenantA, ID: "conv_2", Metadata: nil})
	noErr(t, "update to nil", err)
	checkJSON(t, "metadata cleared", c.Metadata, []byte(`{}`))

	_, err = s.ConversationUpdate(ctx, &store.ConversationUpdateParams{Tenant: tenantA, ID: "conv_none", Metadata: upd})
	isNotFound(t, "update unknown", err)
	_, err = s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: tenantA, ID: "conv_none"})
	isNotFound(t, "get unknown", err)
	_, err = s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_none"})
	isNotFound(t, "items of unknown", err)
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "items of empty", err)
	if len(all) != 0 {
		t.Errorf("empty conversation has %d items", len(all))
	}
}

func testConversationConflict(t *testing.T, s store.Store) {
	createConversation(t, s, tenantA, "conv_1", msgs(t, "i", 2))
	err := s.ConversationCreate(t.Context(), &store.ConversationCreateParams{
		Conversation: store.Conversation{ID: "conv_1", Tenant: tenantA, CreatedAt: now()},
		Items:        msgs(t, "j", 1),
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("second create: %v, want ErrConflict", err)
	}
	all, err := s.ConversationItemsAll(t.Context(), &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "items", err)
	checkItems(t, "items after failed create", all, msgs(t, "i", 2))
	countItems(t, s, tenantA, 2)
}

func testConversationItemGetDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	items := msgs(t, "i", 3)
	createConversation(t, s, tenantA, "conv_1", items)
	got, err := s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "i_1"})
	noErr(t, "get", err)
	checkItems(t, "get", []wire.Item{got}, items[1:2])
	noErr(t, "delete", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "i_1"}))
	_, err = s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "i_1"})
	isNotFound(t, "get deleted", err)
	isNotFound(t, "delete again", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "i_1"}))
	_, err = s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: "i_1"})
	isNotFound(t, "item created directly in the conversation, after removal", err)

	extra := msgs(t, "x", 2)
	noErr(t, "append", s.ConversationItemAppend(ctx, &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: "conv_1", Items: extra}))
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "all", err)
	checkItems(t, "after delete and append", all, []wire.Item{items[0], items[2], extra[0], extra[1]})

	// Removing a response's item from the conversation keeps it in the response.
	commitTurn(t, s, tenantA, "resp_1", "", "conv_1", msgs(t, "ri", 1), msgs(t, "ro", 1))
	noErr(t, "delete response item", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "ro_0"}))
	_, out, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "response get", err)
	checkItems(t, "response keeps the item", out, msgs(t, "ro", 1))
	// An id the conversation lists twice, once created there and once as a response's item: one
	// delete removes both (the direct item and the response item's listing).
	twice := msgs(t, "tw", 1)
	noErr(t, "append twice", s.ConversationItemAppend(ctx, &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: "conv_1", Items: twice}))
	commitTurn(t, s, tenantA, "resp_2", "", "conv_1", twice, nil)
	noErr(t, "delete an id listed twice", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "tw_0"}))
	_, err = s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "tw_0"})
	isNotFound(t, "get an id listed twice after its delete", err)
	isNotFound(t, "delete in unknown conversation", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_none", ItemID: "i_0"}))
	_, err = s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tenantA, ConversationID: "conv_none", ItemID: "i_0"})
	isNotFound(t, "get in unknown conversation", err)
}

func testCommitAppendsToConversation(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := msgs(t, "c", 2)
	createConversation(t, s, tenantA, "conv_1", first)
	in1, out1 := msgs(t, "in1", 2), msgs(t, "out1", 2)
	commitTurn(t, s, tenantA, "resp_1", "", "conv_1", in1, out1)
	direct := msgs(t, "d", 1)
	noErr(t, "append", s.ConversationItemAppend(ctx, &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: "conv_1", Items: direct}))
	in2, out2 := msgs(t, "in2", 1), msgs(t, "out2", 3)
	commitTurn(t, s, tenantA, "resp_2", "", "conv_1", in2, out2)
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "all", err)
	checkItems(t, "conversation", all, concat(first, in1, out1, direct, in2, out2))
	got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "get", err)
	if got.ConversationID != "conv_1" {
		t.Errorf("conversation id %q, want conv_1", got.ConversationID)
	}
}

func testConcurrentConversation(t *testing.T, s store.Store) {
	const workers = 20
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", msgs(t, "seed", 1))
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var err error
			if w%4 == 3 {
				err = s.ConversationItemAppend(ctx, &store.ConversationItemAppendParams{
					Tenant: tenantA, ConversationID: "conv_1", Items: msgs(t, fmt.Sprintf("w%d_direct", w), 3),
				})
			} else {
				err = s.ResponseCommit(ctx, &store.ResponseCommitParams{
					Response:       newResponse(tenantA, fmt.Sprintf("resp_%d", w), "", "conv_1", wire.StatusCompleted),
					Input:          msgs(t, fmt.Sprintf("w%d_in", w), 2),
					Output:         msgs(t, fmt.Sprintf("w%d_out", w), 1),
					ConversationID: "conv_1",
				})
			}
			if err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "all", err)
	if len(all) != 1+workers*3 {
		t.Fatalf("%d items, want %d", len(all), 1+workers*3)
	}
	// Every worker's items are contiguous and in order; no item is lost or doubled.
	seen := map[string]bool{}
	for i := 1; i < len(all); i += 3 {
		var w int
		if _, err := fmt.Sscanf(all[i].ID, "w%d_", &w); err != nil {
			t.Fatalf("item %d is %s: %v", i, all[i].ID, err)
		}
		var want []string
		if w%4 == 3 {
			want = []string{fmt.Sprintf("w%d_direct_0", w), fmt.Sprintf("w%d_direct_1", w), fmt.Sprintf("w%d_direct_2", w)}
		} else {
			want = []string{fmt.Sprintf("w%d_in_0", w), fmt.Sprintf("w%d_in_1", w), fmt.Sprintf("w%d_out_0", w)}
		}
		if got := ids(all[i : i+3]); !slices.Equal(got, want) {
			t.Fatalf("items %d..%d are %v, want %v", i, i+2, got, want)
		}
		if seen[want[0]] {
			t.Fatalf("worker %d's items appear twice", w)
		}
		seen[want[0]] = true
	}
	// Paging by seq agrees with the full load.
	pages, _ := pageAll(t, 7, func(after string, limit int) (*store.ItemPage, error) {
		return s.ConversationItemList(ctx, &store.ConversationItemListParams{Tenant: tenantA, ConversationID: "conv_1", After: after, Limit: limit, Order: store.OrderAsc})
	})
	var paged []string
	for _, p := range pages {
		paged = append(paged, p...)
	}
	if !slices.Equal(paged, ids(all)) {
		t.Errorf("paged %v,\nwant %v", paged, ids(all))
	}
}

func testTurnLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	acquire := func(resp string, exp time.Time) error {
		return s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: resp, ExpiresAt: exp})
	}
	release := func(resp string) error {
		return s.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: resp})
	}
	later := now().Add(time.Hour)
	noErr(t, "acquire", acquire("resp_1", later))
	noErr(t, "re-acquire by the holder", acquire("resp_1", later))
	if err := acquire("resp_2", later); !errors.Is(err, store.ErrConflict) {
		t.Errorf("acquire while held: %v, want ErrConflict", err)
	}
	noErr(t, "release by a non-holder is a no-op", release("resp_2"))
	if err := acquire("resp_2", later); !errors.Is(err, store.ErrConflict) {
		t.Errorf("acquire after a non-holder's release: %v, want ErrConflict", err)
	}
	noErr(t, "release", release("resp_1"))
	noErr(t, "acquire after release", acquire("resp_2", later))
	noErr(t, "release", release("resp_2"))
	noErr(t, "release when free", release("resp_2"))

	// An expired lease no longer blocks.
	noErr(t, "acquire short lease", acquire("resp_3", now().Add(-time.Millisecond)))
	noErr(t, "acquire over an expired lease", acquire("resp_4", later))
	if err := acquire("resp_3", later); !errors.Is(err, store.ErrConflict) {
		t.Errorf("old holder re-acquire after takeover: %v, want ErrConflict", err)
	}

	isNotFound(t, "acquire on unknown conversation", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_none", ResponseID: "resp_1", ExpiresAt: later}))
	noErr(t, "release on unknown conversation", s.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{Tenant: tenantA, ConversationID: "conv_none", ResponseID: "resp_1"}))

	// Concurrent acquirers: exactly one wins.
	createConversation(t, s, tenantA, "conv_2", nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 10 {
		wg.Go(func() {
			err := s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_2", ResponseID: fmt.Sprintf("resp_%d", i), ExpiresAt: later})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("acquire %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d concurrent acquirers won, want 1", wins)
	}
}

func testCommitReleasesTurn(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	later := now().Add(time.Hour)
	noErr(t, "acquire", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_1", ExpiresAt: later}))
	commitTurn(t, s, tenantA, "resp_1", "", "conv_1", msgs(t, "i", 1), msgs(t, "o", 1))
	noErr(t, "acquire after commit", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_2", ExpiresAt: later}))
	// A commit by a response that does not hold the lease leaves it held.
	commitTurn(t, s, tenantA, "resp_3", "", "conv_1", msgs(t, "i3", 1), msgs(t, "o3", 1))
	if err := s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_4", ExpiresAt: later}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("acquire while resp_2 holds the lease: %v, want ErrConflict", err)
	}
}
