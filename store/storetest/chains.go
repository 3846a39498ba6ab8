package storetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// buildChain commits depth responses resp_0 … resp_{depth-1}, each continuing the one before,
// with one input and one output item each, and returns the items in chain order.
func buildChain(t testing.TB, s store.Store, tenant string, depth int) []wire.Item {
	t.Helper()
	var all []wire.Item
	prev := ""
	for i := range depth {
		id := fmt.Sprintf("resp_%d", i)
		in := []wire.Item{msg(t, fmt.Sprintf("in_%d", i), fmt.Sprintf("question %d", i))}
		out := []wire.Item{msg(t, fmt.Sprintf("out_%d", i), fmt.Sprintf("answer %d", i))}
		commitTurn(t, s, tenant, id, prev, "", in, out)
		all = append(all, in[0], out[0])
		prev = id
	}
	return all
}

func testChainDeep(t *testing.T, s store.Store) {
	const depth = 1000
	want := buildChain(t, s, tenantA, depth)
	start := time.Now()
	chain, err := s.ResponseChainGet(t.Context(), &store.ResponseChainGetParams{Tenant: tenantA, ID: fmt.Sprintf("resp_%d", depth-1)})
	t.Logf("chain of depth %d loaded in %v", depth, time.Since(start))
	noErr(t, "chain get", err)
	checkItems(t, "chain items", chain.Items(), want)
	if len(responsesOf(chain)) != depth {
		t.Fatalf("%d responses, want %d", len(responsesOf(chain)), depth)
	}
	for i, r := range responsesOf(chain) {
		if r.ID != fmt.Sprintf("resp_%d", i) || r.Tenant != tenantA || r.Status != wire.StatusCompleted {
			t.Fatalf("response %d is %s (%s), want resp_%d completed", i, r.ID, r.Status, i)
		}
	}
	if chain.Missing != "" {
		t.Errorf("missing %q, want none", chain.Missing)
	}
	// The context of the last response is the same history but for its own output.
	start = time.Now()
	items, err := s.ResponseContextGet(t.Context(), &store.ResponseContextGetParams{Tenant: tenantA, ID: fmt.Sprintf("resp_%d", depth-1)})
	t.Logf("context of depth %d loaded in %v", depth, time.Since(start))
	noErr(t, "context get", err)
	checkItems(t, "context items", items, want[:len(want)-1])
	// A chain from the middle ends there.
	chain, err = s.ResponseChainGet(t.Context(), &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_9"})
	noErr(t, "chain get middle", err)
	checkItems(t, "chain of resp_9", chain.Items(), want[:20])
}

func testChainMissing(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := buildChain(t, s, tenantA, 5)
	noErr(t, "delete", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_2"}))
	chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_4"})
	noErr(t, "chain get", err)
	if chain.Missing != "resp_2" {
		t.Errorf("missing %q, want resp_2", chain.Missing)
	}
	checkItems(t, "items after the gap", chain.Items(), want[6:])
	if got := len(responsesOf(chain)); got != 2 || responsesOf(chain)[0].ID != "resp_3" || responsesOf(chain)[1].ID != "resp_4" {
		t.Errorf("responses %v, want resp_3, resp_4", responsesOf(chain))
	}
	// The root of a whole chain has no previous response: nothing is missing.
	chain, err = s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "chain get root side", err)
	if chain.Missing != "" || len(responsesOf(chain)) != 2 {
		t.Errorf("chain of resp_1: missing %q, %d responses; want none, 2", chain.Missing, len(responsesOf(chain)))
	}
	// A response naming a previous response that never existed reports it too.
	commitTurn(t, s, tenantA, "resp_orphan", "resp_never", "", nil, msgs(t, "o", 1))
	chain, err = s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_orphan"})
	noErr(t, "chain get orphan", err)
	if chain.Missing != "resp_never" {
		t.Errorf("missing %q, want resp_never", chain.Missing)
	}
}

func testChainUnknown(t *testing.T, s store.Store) {
	_, err := s.ResponseChainGet(t.Context(), &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_none"})
	isNotFound(t, "chain of unknown", err)
}

func countItems(t testing.TB, s store.Store, tenant string, want int) {
	t.Helper()
	c, ok := s.(ItemCounter)
	if !ok {
		t.Fatalf("%T does not implement storetest.ItemCounter, which the suite needs to check storage size", s)
	}
	n, err := c.ItemCount(context.Background(), tenant)
	noErr(t, "item count", err)
	if n != want {
		t.Errorf("tenant %s has %d item rows, want %d", tenant, n, want)
	}
}

func testStoragePerTurn(t *testing.T, s store.Store) {
	const turns = 50
	buildChain(t, s, tenantA, turns)
	countItems(t, s, tenantA, 2*turns)

	createConversation(t, s, tenantB, "conv_1", nil)
	for i := range turns {
		in := []wire.Item{msg(t, fmt.Sprintf("in_%d", i), "q")}
		out := []wire.Item{msg(t, fmt.Sprintf("out_%d", i), "a")}
		commitTurn(t, s, tenantB, fmt.Sprintf("resp_%d", i), "", "conv_1", in, out)
	}
	countItems(t, s, tenantB, 2*turns)
	all, err := s.ConversationItemsAll(t.Context(), &store.ConversationItemsAllParams{Tenant: tenantB, ConversationID: "conv_1"})
	noErr(t, "conversation items", err)
	if len(all) != 2*turns {
		t.Errorf("conversation lists %d items, want %d", len(all), 2*turns)
	}
}

func testItemGetMostRecent(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := mustItem(t, `{"id":"fc_same","type":"function_call","call_id":"c","name":"f","arguments":"1"}`)
	again := mustItem(t, `{"id":"fc_same","type":"function_call","call_id":"c","name":"f","arguments":"2"}`)
	commitTurn(t, s, tenantA, "resp_1", "", "", nil, []wire.Item{first})
	commitTurn(t, s, tenantA, "resp_2", "resp_1", "", []wire.Item{again}, nil)
	got, err := s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: "fc_same"})
	noErr(t, "item get", err)
	checkItems(t, "most recent", []wire.Item{got}, []wire.Item{again})
	// Both copies stay where they were stored.
	chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "chain", err)
	checkItems(t, "chain keeps both copies", chain.Items(), []wire.Item{first, again})
	_, err = s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: "nope"})
	isNotFound(t, "item get unknown", err)
}

func testItemGetMany(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := mustItem(t, `{"id":"fc_same","type":"function_call","call_id":"c","name":"f","arguments":"1"}`)
	again := mustItem(t, `{"id":"fc_same","type":"function_call","call_id":"c","name":"f","arguments":"2"}`)
	odd := oddItems(t)
	commitTurn(t, s, tenantA, "resp_1", "", "", odd[:3], []wire.Item{first})
	commitTurn(t, s, tenantA, "resp_2", "resp_1", "", []wire.Item{again}, nil)
	createConversation(t, s, tenantA, "conv_1", odd[3:5])
	// Another tenant's item of the same id is never returned.
	commitTurn(t, s, tenantB, "resp_b", "", "", []wire.Item{msg(t, "msg_u", "tenant b")}, nil)
	commitTurn(t, s, tenantB, "resp_b2", "", "", []wire.Item{msg(t, "only_b", "tenant b")}, nil)

	want := []wire.Item{again, odd[0], odd[1], odd[2], odd[3], odd[4]}
	req := append(ids(want), "fc_same", "nope", "only_b", odd[0].ID)
	got, err := s.ItemGetMany(ctx, &store.ItemGetManyParams{Tenant: tenantA, IDs: req})
	noErr(t, "item get many", err)
	if len(got) != len(want) {
		t.Errorf("got %d items %v, want %d %v", len(got), slices.Sorted(maps.Keys(got)), len(want), ids(want))
	}
	for _, w := range want {
		it, ok := got[w.ID]
		if !ok {
			t.Errorf("%s missing", w.ID)
			continue
		}
		checkItems(t, "item "+w.ID, []wire.Item{it}, []wire.Item{w})
	}
	// Each agrees with ItemGet.
	for id, it := range got {
		one, err := s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: id})
		noErr(t, "item get "+id, err)
		checkItems(t, "item get many vs item get", []wire.Item{it}, []wire.Item{one})
	}
	for _, ids := range [][]string{nil, {"nope"}, {"only_b"}} {
		got, err := s.ItemGetMany(ctx, &store.ItemGetManyParams{Tenant: tenantA, IDs: ids})
		noErr(t, fmt.Sprintf("item get many %v", ids), err)
		if len(got) != 0 {
			t.Errorf("item get many %v: %v, want an empty map", ids, slices.Sorted(maps.Keys(got)))
		}
	}
}

// pageAll walks a list with the given page size and returns the pages' ids and has_more flags.
func pageAll(t testing.TB, limit int, list func(after string, limit int) (*store.ItemPage, error)) (pages [][]string, more []bool) {
	t.Helper()
	after := ""
	for range 100 {
		p, err := list(after, limit)
		noErr(t, "list page", err)
		pages = append(pages, ids(p.Items))
		more = append(more, p.HasMore)
		if !p.HasMore {
			return pages, more
		}
		if len(p.Items) == 0 {
			t.Fatal("empty page with has_more")
		}
		after = p.Items[len(p.Items)-1].ID
	}
	t.Fatal("pagination does not end")
	return nil, nil
}

func checkPages(t testing.TB, what string, list func(after string, limit int, order store.Order) (*store.ItemPage, error)) {
	t.Helper()
	for _, tc := range []struct {
		order store.Order
		limit int
		pages [][]string
	}{
		{store.OrderAsc, 3, [][]string{{"i_0", "i_1", "i_2"}, {"i_3", "i_4", "i_5"}, {"i_6"}}},
		{store.OrderDesc, 3, [][]string{{"i_6", "i_5", "i_4"}, {"i_3", "i_2", "i_1"}, {"i_0"}}},
		{store.OrderAsc, 7, [][]string{{"i_0", "i_1", "i_2", "i_3", "i_4", "i_5", "i_6"}}},
		{store.OrderDesc, 100, [][]string{{"i_6", "i_5", "i_4", "i_3", "i_2", "i_1", "i_0"}}},
		{store.OrderAsc, 0, [][]string{{"i_0", "i_1", "i_2", "i_3", "i_4", "i_5", "i_6"}}}, // 0: the default page size
	} {
		pages, more := pageAll(t, tc.limit, func(after string, limit int) (*store.ItemPage, error) { return list(after, limit, tc.order) })
		if fmt.Sprint(pages) != fmt.Sprint(tc.pages) {
			t.Errorf("%s %s limit %d: pages %v, want %v", what, tc.order, tc.limit, pages, tc.pages)
		}
		for i, m := range more {
			if m != (i < len(more)-1) {
				t.Errorf("%s %s limit %d: has_more %v", what, tc.order, tc.limit, more)
				break
			}
		}
	}
	// A page ending exactly at the end has no more.
	p, err := list("i_3", 3, store.OrderAsc)
	noErr(t, "list after i_3", err)
	if fmt.Sprint(ids(p.Items)) != "[i_4 i_5 i_6]" || p.HasMore {
		t.Errorf("%s after i_3: %v has_more %v, want [i_4 i_5 i_6] false", what, ids(p.Items), p.HasMore)
	}
	p, err = list("i_0", 3, store.OrderDesc)
	noErr(t, "list desc after i_0", err)
	if len(p.Items) != 0 || p.HasMore {
		t.Errorf("%s desc after the last item: %v has_more %v, want empty", what, ids(p.Items), p.HasMore)
	}
}

func testResponseItemPages(t *testing.T, s store.Store) {
	commitTurn(t, s, tenantA, "resp_1", "", "", msgs(t, "i", 7), msgs(t, "o", 2))
	checkPages(t, "input items", func(after string, limit int, order store.Order) (*store.ItemPage, error) {
		return s.ItemListByResponse(t.Context(), &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleInput, After: after, Limit: limit, Order: order})
	})
	p, err := s.ItemListByResponse(t.Context(), &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleOutput, Limit: 10, Order: store.OrderAsc})
	noErr(t, "output items", err)
	if fmt.Sprint(ids(p.Items)) != "[o_0 o_1]" || p.HasMore {
		t.Errorf("output items %v has_more %v", ids(p.Items), p.HasMore)
	}
	_, err = s.ItemListByResponse(t.Context(), &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_none", Role: store.RoleInput, Limit: 10, Order: store.OrderAsc})
	isNotFound(t, "items of unknown response", err)
	// A response without input items lists nothing.
	commitTurn(t, s, tenantA, "resp_2", "", "", nil, msgs(t, "o2", 1))
	p, err = s.ItemListByResponse(t.Context(), &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_2", Role: store.RoleInput, Limit: 10, Order: store.OrderDesc})
	noErr(t, "empty input items", err)
	if len(p.Items) != 0 || p.HasMore {
		t.Errorf("empty input: %v has_more %v", ids(p.Items), p.HasMore)
	}
}

func testConversationItemPages(t *testing.T, s store.Store) {
	createConversation(t, s, tenantA, "conv_1", msgs(t, "i", 4))
	noErr(t, "append", s.ConversationItemAppend(t.Context(), &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: "conv_1", Items: msgs(t, "i", 7)[4:]}))
	checkPages(t, "conversation items", func(after string, limit int, order store.Order) (*store.ItemPage, error) {
		return s.ConversationItemList(t.Context(), &store.ConversationItemListParams{Tenant: tenantA, ConversationID: "conv_1", After: after, Limit: limit, Order: order})
	})
	_, err := s.ConversationItemList(t.Context(), &store.ConversationItemListParams{Tenant: tenantA, ConversationID: "conv_none", Limit: 10, Order: store.OrderAsc})
	isNotFound(t, "items of unknown conversation", err)
	createConversation(t, s, tenantA, "conv_empty", nil)
	p, err := s.ConversationItemList(t.Context(), &store.ConversationItemListParams{Tenant: tenantA, ConversationID: "conv_empty", Limit: 10, Order: store.OrderAsc})
	noErr(t, "empty conversation", err)
	if len(p.Items) != 0 || p.HasMore {
		t.Errorf("empty conversation: %v has_more %v", ids(p.Items), p.HasMore)
	}
}

func testUnknownCursor(t *testing.T, s store.Store) {
	commitTurn(t, s, tenantA, "resp_1", "", "", msgs(t, "i", 3), msgs(t, "o", 1))
	createConversation(t, s, tenantA, "conv_1", msgs(t, "i", 3))
	_, err := s.ItemListByResponse(t.Context(), &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleInput, After: "nope", Limit: 10, Order: store.OrderAsc})
	isNotFound(t, "response items after unknown cursor", err)
	// An id of the response's other role is not in this list.
	_, err = s.ItemListByResponse(t.Context(), &store.ItemListByResponseParams{Tenant: tenantA, ResponseID: "resp_1", Role: store.RoleInput, After: "o_0", Limit: 10, Order: store.OrderAsc})
	isNotFound(t, "response items after a cursor from another list", err)
	_, err = s.ConversationItemList(t.Context(), &store.ConversationItemListParams{Tenant: tenantA, ConversationID: "conv_1", After: "nope", Limit: 10, Order: store.OrderDesc})
	isNotFound(t, "conversation items after unknown cursor", err)
}
