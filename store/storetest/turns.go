package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// turnCases prove a turn's lifecycle: ResponseBegin's input, the Begun commit, the event log,
// ResponseContextGet, the lease guards on delete and ConversationTurnExtend. Exercise runs them
// after cases.
var turnCases = []storeCase{
	{"chain turns keep each response's input and output apart", testChainTurns},
	{"begin stores the input items, which outlive a sweep", testBeginStoresInput},
	{"a begun commit finishes the record and appends the stored input without writing it again", testBegunCommit},
	{"a begun commit of a deleted response writes nothing and is not found", testBegunCommitDeleted},
	{"a begun commit is idempotent and conflicts with a swept response", testBegunCommitIdempotent},
	{"commit logs its events in the same transaction", testCommitLogsEvents},
	{"event append is idempotent by seq and keeps the bytes exactly", testEventAppendIdempotent},
	{"event list returns events after a seq in order up to a limit", testEventListPages},
	{"events of an unknown or another tenant's response are not found", testEventUnknown},
	{"one append logs several responses' events and names the missing ones", testEventAppendMany},
	{"deleting or purging a response deletes its events", testEventsDeletedWithResponse},
	{"context of a chain turn is each ancestor's items then its own input", testContextChain},
	{"context of a conversation turn is what preceded its input then its input", testContextConversation},
	{"context without history, or whose conversation is gone, is its own input", testContextOwnInput},
	{"context of an unknown or another tenant's response is not found", testContextUnknown},
	{"response delete refuses an unfinished response whose lease is live", testResponseDeleteLiveLease},
	{"conversation delete refuses while a turn holds a live lease", testConversationDeleteLiveTurn},
	{"turn extend moves only the holder's lease and never takes a free one", testTurnExtend},
	{"a failed turn's commit that releases the turn frees the holder's lease and appends nothing", testFailedCommitReleasesTurn},
}

// beginTurn begins an in-progress response with the given input, leased by w1 until leaseUntil.
func beginTurn(t testing.TB, s store.Store, tenant, id, conv string, in []wire.Item, leaseUntil time.Time) store.Response {
	t.Helper()
	r := newResponse(tenant, id, "", conv, wire.StatusInProgress)
	noErr(t, "begin "+id, s.ResponseBegin(context.Background(), &store.ResponseBeginParams{
		Response: r, Input: in, LeaseOwner: "w1", LeaseExpiresAt: leaseUntil,
	}))
	return r
}

// finalOf is the completed record of a begun response.
func finalOf(begun store.Response) store.Response {
	f := newResponse(begun.Tenant, begun.ID, begun.PreviousResponseID, begun.ConversationID, wire.StatusCompleted)
	f.CreatedAt = begun.CreatedAt
	return f
}

func inputOf(t testing.TB, s store.Store, tenant, id string) []wire.Item {
	t.Helper()
	page, err := s.ItemListByResponse(context.Background(), &store.ItemListByResponseParams{
		Tenant: tenant, ResponseID: id, Role: store.RoleInput, Limit: store.MaxPageLimit, Order: store.OrderAsc,
	})
	noErr(t, "input items of "+id, err)
	return page.Items
}

func conversationItems(t testing.TB, s store.Store, tenant, id string) []wire.Item {
	t.Helper()
	all, err := s.ConversationItemsAll(context.Background(), &store.ConversationItemsAllParams{Tenant: tenant, ConversationID: id})
	noErr(t, "conversation items of "+id, err)
	return all
}

// events returns n events seq from..from+n-1 whose data are distinct JSON texts a careless store
// would change (spacing, escapes, key order, raw multi-byte characters).
func events(from, n int) []store.Event {
	out := make([]store.Event, n)
	for i := range out {
		seq := int64(from + i)
		out[i] = store.Event{Seq: seq, Type: "response.output_text.delta", Data: []byte(fmt.Sprintf(
			`{"type":"response.output_text.delta", "sequence_number":%d,"delta":"é 🎉 \"q\" \u00e9\n","z":1,"a":1.0}`, seq))}
	}
	return out
}

func listEvents(t testing.TB, s store.Store, tenant, id string, after int64, limit int) []store.Event {
	t.Helper()
	evs, err := s.ResponseEventList(context.Background(), &store.ResponseEventListParams{Tenant: tenant, ResponseID: id, After: after, Limit: limit})
	noErr(t, fmt.Sprintf("event list of %s after %d", id, after), err)
	return evs
}

// checkEvents fails unless got equals want, data byte for byte.
func checkEvents(t testing.TB, what string, got, want []store.Event) {
	t.Helper()
	seqs := func(evs []store.Event) []int64 {
		out := make([]int64, len(evs))
		for i, e := range evs {
			out[i] = e.Seq
		}
		return out
	}
	if len(got) != len(want) {
		t.Errorf("%s: events %v, want %v", what, seqs(got), seqs(want))
		return
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Type != want[i].Type || string(got[i].Data) != string(want[i].Data) {
			t.Errorf("%s: event %d is %d %s %q, want %d %s %q", what, i, got[i].Seq, got[i].Type, got[i].Data, want[i].Seq, want[i].Type, want[i].Data)
		}
	}
}

func testChainTurns(t *testing.T, s store.Store) {
	in0, out0 := msgs(t, "in0", 2), msgs(t, "out0", 1)
	in1, out1 := msgs(t, "in1", 1), msgs(t, "out1", 3)
	in2 := msgs(t, "in2", 2)
	commitTurn(t, s, tenantA, "resp_0", "", "", in0, out0)
	commitTurn(t, s, tenantA, "resp_1", "resp_0", "", in1, out1)
	commitTurn(t, s, tenantA, "resp_2", "resp_1", "", in2, nil)
	chain, err := s.ResponseChainGet(t.Context(), &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "chain get", err)
	want := []struct {
		id      string
		in, out []wire.Item
	}{{"resp_0", in0, out0}, {"resp_1", in1, out1}, {"resp_2", in2, nil}}
	if len(chain.Turns) != len(want) {
		t.Fatalf("%d turns, want %d", len(chain.Turns), len(want))
	}
	for i, w := range want {
		ct := chain.Turns[i]
		if ct.Response.ID != w.id || ct.Response.Status != wire.StatusCompleted {
			t.Errorf("turn %d is %s (%s), want %s completed", i, ct.Response.ID, ct.Response.Status, w.id)
		}
		checkItems(t, fmt.Sprintf("turn %d input", i), ct.Input, w.in)
		checkItems(t, fmt.Sprintf("turn %d output", i), ct.Output, w.out)
	}
	checkItems(t, "flattened", chain.Items(), concat(in0, out0, in1, out1, in2))
}

func testBeginStoresInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := oddItems(t)
	beginTurn(t, s, tenantA, "resp_1", "", in, now().Add(-time.Millisecond))
	checkItems(t, "input while in progress", inputOf(t, s, tenantA, "resp_1"), in)
	_, out, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "get", err)
	if len(out) != 0 {
		t.Errorf("output of a begun response %v, want none", ids(out))
	}
	countItems(t, s, tenantA, len(in))

	n, err := s.ResponseSweep(ctx, &store.ResponseSweepParams{Now: now(), Message: "lease expired"})
	noErr(t, "sweep", err)
	if n != 1 {
		t.Fatalf("sweep failed %d responses, want 1", n)
	}
	checkItems(t, "input after the sweeper failed it", inputOf(t, s, tenantA, "resp_1"), in)

	// A begin that fails (the id exists) stores none of its input.
	err = s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: newResponse(tenantA, "resp_1", "", "", wire.StatusInProgress),
		Input: msgs(t, "dup", 2), LeaseOwner: "w2", LeaseExpiresAt: now().Add(time.Hour)})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("second begin: %v, want ErrConflict", err)
	}
	countItems(t, s, tenantA, len(in))
}

func testBegunCommit(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed := msgs(t, "seed", 1)
	createConversation(t, s, tenantA, "conv_1", seed)
	in := msgs(t, "in", 3)
	begun := beginTurn(t, s, tenantA, "resp_1", "conv_1", in, now().Add(time.Hour))
	noErr(t, "acquire", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_1", ExpiresAt: now().Add(time.Hour)}))
	// Input the commit carries again (as a caller might) is not written a second time.
	out := msgs(t, "out", 2)
	final := finalOf(begun)
	final.Echo = json.RawMessage(`{"model":"test-model","final":true}`)
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: final, Input: in, Output: out, ConversationID: "conv_1", Begun: true,
	}))
	got, gotOut, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "get", err)
	checkResponse(t, got, final)
	checkItems(t, "output", gotOut, out)
	checkItems(t, "input", inputOf(t, s, tenantA, "resp_1"), in)
	checkItems(t, "conversation", conversationItems(t, s, tenantA, "conv_1"), concat(seed, in, out))
	countItems(t, s, tenantA, len(seed)+len(in)+len(out))
	// The commit ended the response's lease and released the conversation's turn.
	isNotFound(t, "lease extend after commit", s.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: tenantA, ID: "resp_1", LeaseOwner: "w1", LeaseExpiresAt: now().Add(2 * time.Hour)}))
	noErr(t, "acquire by the next turn", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_2", ExpiresAt: now().Add(time.Hour)}))

	// Without a conversation, the begun input stays the response's only.
	in2 := msgs(t, "in2", 2)
	b2 := beginTurn(t, s, tenantA, "resp_3", "", in2, now().Add(time.Hour))
	noErr(t, "commit without conversation", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: finalOf(b2), Input: msgs(t, "other", 1), Output: msgs(t, "out2", 1), Begun: true}))
	checkItems(t, "input of resp_3", inputOf(t, s, tenantA, "resp_3"), in2)
	_, err = s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: "other_0"})
	isNotFound(t, "input passed to a begun commit", err)
}

func testBegunCommitDeleted(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	begun := beginTurn(t, s, tenantA, "resp_1", "conv_1", msgs(t, "in", 2), now().Add(time.Hour))
	noErr(t, "delete after the lease", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_1", Now: now().Add(2 * time.Hour)}))
	countItems(t, s, tenantA, 0)
	err := s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: finalOf(begun), Input: msgs(t, "in", 2), Output: msgs(t, "out", 1), ConversationID: "conv_1", Begun: true,
		Events: events(0, 3),
	})
	isNotFound(t, "begun commit of a deleted response", err)
	_, _, err = s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	isNotFound(t, "get after the commit", err)
	_, err = s.ResponseEventList(ctx, &store.ResponseEventListParams{Tenant: tenantA, ResponseID: "resp_1", After: -1})
	isNotFound(t, "events after the commit", err)
	countItems(t, s, tenantA, 0)
	if all := conversationItems(t, s, tenantA, "conv_1"); len(all) != 0 {
		t.Errorf("conversation lists %v, want nothing", ids(all))
	}
	// A never begun id is not found either: Begun never inserts.
	err = s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: newResponse(tenantA, "resp_never", "", "", wire.StatusCompleted), Output: msgs(t, "o", 1), Begun: true})
	isNotFound(t, "begun commit of a never begun response", err)
	countItems(t, s, tenantA, 0)
}

func testBegunCommitIdempotent(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	in, out := msgs(t, "in", 2), msgs(t, "out", 1)
	begun := beginTurn(t, s, tenantA, "resp_1", "conv_1", in, now().Add(time.Hour))
	p := &store.ResponseCommitParams{Response: finalOf(begun), Output: out, ConversationID: "conv_1", Begun: true, Events: events(0, 2)}
	noErr(t, "commit", s.ResponseCommit(ctx, p))
	noErr(t, "same commit again", s.ResponseCommit(ctx, p))
	checkItems(t, "conversation", conversationItems(t, s, tenantA, "conv_1"), concat(in, out))
	checkEvents(t, "events", listEvents(t, s, tenantA, "resp_1", -1, 0), events(0, 2))
	countItems(t, s, tenantA, 3)

	// The sweeper failed it: a late commit changes nothing and is a conflict.
	b2 := beginTurn(t, s, tenantA, "resp_2", "", msgs(t, "in2", 1), now().Add(-time.Millisecond))
	_, err := s.ResponseSweep(ctx, &store.ResponseSweepParams{Now: now(), Message: "lease expired"})
	noErr(t, "sweep", err)
	err = s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: finalOf(b2), Output: msgs(t, "late", 1), Begun: true, Events: events(0, 1)})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("begun commit of a swept response: %v, want ErrConflict", err)
	}
	got, gotOut, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "get swept", err)
	if got.Status != wire.StatusFailed || len(gotOut) != 0 {
		t.Errorf("swept response after a late commit: %s with output %v, want failed without output", got.Status, ids(gotOut))
	}
	checkEvents(t, "events of the swept response", listEvents(t, s, tenantA, "resp_2", -1, 0), nil)
}

func testCommitLogsEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Without begin: the whole log comes with the commit.
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: newResponse(tenantA, "resp_1", "", "", wire.StatusCompleted), Output: msgs(t, "o", 1), Events: events(0, 4),
	}))
	checkEvents(t, "log of a direct commit", listEvents(t, s, tenantA, "resp_1", -1, 0), events(0, 4))

	// Begun: the events appended while streaming, then the rest with the commit (one overlapping,
	// as a retry would send it).
	begun := beginTurn(t, s, tenantA, "resp_2", "", msgs(t, "in", 1), now().Add(time.Hour))
	noErr(t, "append", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_2", Events: events(0, 3)}))
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: finalOf(begun), Output: msgs(t, "o2", 1), Begun: true, Events: events(2, 3)}))
	checkEvents(t, "log of a begun commit", listEvents(t, s, tenantA, "resp_2", -1, 0), events(0, 5))

	// A commit that fails logs nothing.
	err := s.ResponseCommit(ctx, &store.ResponseCommitParams{
		Response: newResponse(tenantA, "resp_3", "", "conv_none", wire.StatusCompleted), ConversationID: "conv_none", Events: events(0, 2),
	})
	isNotFound(t, "commit into an unknown conversation", err)
	b3 := beginTurn(t, s, tenantA, "resp_4", "conv_none", nil, now().Add(time.Hour))
	err = s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: finalOf(b3), ConversationID: "conv_none", Begun: true, Events: events(0, 2)})
	isNotFound(t, "begun commit into an unknown conversation", err)
	checkEvents(t, "log after a failed commit", listEvents(t, s, tenantA, "resp_4", -1, 0), nil)
}

func testEventAppendIdempotent(t *testing.T, s store.Store) {
	ctx := t.Context()
	beginTurn(t, s, tenantA, "resp_1", "", nil, now().Add(time.Hour))
	first := events(0, 3)
	first = append(first, store.Event{Seq: 3, Type: "x", Data: []byte("{ \"a\" :\t[1,2] , \"a\":null }\n")})
	noErr(t, "append", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_1", Events: first}))
	// Again, with seqs already logged but other data: the logged events stay as they are.
	again := events(2, 3)
	again[0].Data, again[1].Data = []byte(`{"changed":true}`), []byte(`{"changed":true}`)
	noErr(t, "append overlapping", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_1", Events: again}))
	noErr(t, "append nothing", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_1"}))
	checkEvents(t, "log", listEvents(t, s, tenantA, "resp_1", -1, 0), append(first, again[2]))
}

func testEventListPages(t *testing.T, s store.Store) {
	ctx := t.Context()
	beginTurn(t, s, tenantA, "resp_1", "", nil, now().Add(time.Hour))
	checkEvents(t, "empty log", listEvents(t, s, tenantA, "resp_1", -1, 0), nil)
	// Appended out of order, listed in seq order.
	all := events(0, 12)
	noErr(t, "append late", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_1", Events: all[6:]}))
	noErr(t, "append early", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_1", Events: all[:6]}))
	checkEvents(t, "all", listEvents(t, s, tenantA, "resp_1", -1, 0), all)
	checkEvents(t, "after 0", listEvents(t, s, tenantA, "resp_1", 0, 0), all[1:])
	checkEvents(t, "after 4, limit 3", listEvents(t, s, tenantA, "resp_1", 4, 3), all[5:8])
	checkEvents(t, "after 9, limit 5", listEvents(t, s, tenantA, "resp_1", 9, 5), all[10:])
	checkEvents(t, "after the last", listEvents(t, s, tenantA, "resp_1", 11, 0), nil)
	checkEvents(t, "limit 1", listEvents(t, s, tenantA, "resp_1", -1, 1), all[:1])
}

func testEventUnknown(t *testing.T, s store.Store) {
	ctx := t.Context()
	isNotFound(t, "append to an unknown response", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_none", Events: events(0, 1)}))
	_, err := s.ResponseEventList(ctx, &store.ResponseEventListParams{Tenant: tenantA, ResponseID: "resp_none", After: -1})
	isNotFound(t, "list of an unknown response", err)

	beginTurn(t, s, tenantA, "resp_a", "", nil, now().Add(time.Hour))
	noErr(t, "append", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_a", Events: events(0, 2)}))
	isNotFound(t, "B appends to A's response", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantB, ResponseID: "resp_a", Events: events(2, 1)}))
	_, err = s.ResponseEventList(ctx, &store.ResponseEventListParams{Tenant: tenantB, ResponseID: "resp_a", After: -1})
	isNotFound(t, "B lists A's response", err)
	checkEvents(t, "A's log", listEvents(t, s, tenantA, "resp_a", -1, 0), events(0, 2))
	// B's own response of the same id has its own log.
	beginTurn(t, s, tenantB, "resp_a", "", nil, now().Add(time.Hour))
	checkEvents(t, "B's log", listEvents(t, s, tenantB, "resp_a", -1, 0), nil)
}

func testEventAppendMany(t *testing.T, s store.Store) {
	ctx := t.Context()
	beginTurn(t, s, tenantA, "resp_1", "", nil, now().Add(time.Hour))
	beginTurn(t, s, tenantA, "resp_2", "", nil, now().Add(time.Hour))
	beginTurn(t, s, tenantB, "resp_3", "", nil, now().Add(time.Hour))
	noErr(t, "append", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_2", Events: events(0, 2)}))
	missing, err := s.ResponseEventAppend(ctx, []store.ResponseEventAppendParams{
		{Tenant: tenantA, ResponseID: "resp_1", Events: events(0, 3)},
		{Tenant: tenantA, ResponseID: "resp_none", Events: events(0, 1)},
		{Tenant: tenantA, ResponseID: "resp_2", Events: events(1, 4)}, // seq 1 is logged already
		{Tenant: tenantA, ResponseID: "resp_3", Events: events(0, 1)}, // B's
		{Tenant: tenantB, ResponseID: "resp_3", Events: events(5, 2)},
		{Tenant: tenantB, ResponseID: "resp_1"},                       // nothing to log, and not B's
		{Tenant: tenantB, ResponseID: "resp_3", Events: events(0, 1)}, // the same response twice
	})
	noErr(t, "append many", err)
	if !slices.Equal(missing, []int{1, 3, 5}) {
		t.Errorf("missing %v, want [1 3 5] (an unknown id, another tenant's twice)", missing)
	}
	checkEvents(t, "resp_1", listEvents(t, s, tenantA, "resp_1", -1, 0), events(0, 3))
	checkEvents(t, "resp_2", listEvents(t, s, tenantA, "resp_2", -1, 0), events(0, 5))
	checkEvents(t, "B's resp_3", listEvents(t, s, tenantB, "resp_3", -1, 0), append(events(0, 1), events(5, 2)...))

	missing, err = s.ResponseEventAppend(ctx, nil)
	if err != nil || len(missing) != 0 {
		t.Errorf("an empty append: missing %v, error %v; want none", missing, err)
	}
}

func testEventsDeletedWithResponse(t *testing.T, s store.Store) {
	ctx := t.Context()
	commitLogged := func(id string, created time.Time) {
		t.Helper()
		r := newResponse(tenantA, id, "", "", wire.StatusCompleted)
		r.CreatedAt = created
		noErr(t, "commit "+id, s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r, Output: msgs(t, id, 1), Events: events(0, 3)}))
	}
	commitLogged("resp_deleted", now())
	commitLogged("resp_purged", now().Add(-48*time.Hour))
	noErr(t, "delete", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_deleted", Now: now()}))
	n, err := s.ResponsePurge(ctx, &store.ResponsePurgeParams{Before: now().Add(-time.Hour), Limit: 10})
	noErr(t, "purge", err)
	if n != 1 {
		t.Fatalf("purge deleted %d, want 1", n)
	}
	for _, id := range []string{"resp_deleted", "resp_purged"} {
		_, err := s.ResponseEventList(ctx, &store.ResponseEventListParams{Tenant: tenantA, ResponseID: id, After: -1})
		isNotFound(t, "events of "+id, err)
		// The id used again starts with an empty log: nothing of the old one was left behind.
		beginTurn(t, s, tenantA, id, "", nil, now().Add(time.Hour))
		checkEvents(t, "log of a new "+id, listEvents(t, s, tenantA, id, -1, 0), nil)
	}
}

func testContextChain(t *testing.T, s store.Store) {
	ctx := t.Context()
	all := buildChain(t, s, tenantA, 4) // in_0 out_0 … in_3 out_3
	got, err := s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_3"})
	noErr(t, "context of resp_3", err)
	checkItems(t, "context of resp_3", got, all[:7])
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_0"})
	noErr(t, "context of resp_0", err)
	checkItems(t, "context of the root", got, all[:1])

	// A turn in progress: its ancestors and its begun input.
	in := msgs(t, "in_4", 2)
	r := newResponse(tenantA, "resp_4", "resp_3", "", wire.StatusInProgress)
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: r, Input: in, LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}))
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_4"})
	noErr(t, "context of resp_4", err)
	checkItems(t, "context of a turn in progress", got, concat(all, in))

	// A deleted ancestor takes its items, and those before it, out of the context.
	noErr(t, "delete", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_1", Now: now()}))
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_3"})
	noErr(t, "context after a gap", err)
	checkItems(t, "context after a gap", got, all[4:7])
}

func testContextConversation(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed := msgs(t, "seed", 2)
	createConversation(t, s, tenantA, "conv_1", seed)
	in1, out1 := msgs(t, "in1", 1), msgs(t, "out1", 2)
	commitTurn(t, s, tenantA, "resp_1", "", "conv_1", in1, out1)
	direct := msgs(t, "d", 1)
	noErr(t, "append", s.ConversationItemAppend(ctx, &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: "conv_1", Items: direct}))
	in2 := msgs(t, "in2", 2)
	b2 := beginTurn(t, s, tenantA, "resp_2", "conv_1", in2, now().Add(time.Hour))
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: finalOf(b2), Output: msgs(t, "out2", 1), ConversationID: "conv_1", Begun: true}))
	// Later items are not part of resp_2's context.
	commitTurn(t, s, tenantA, "resp_3", "", "conv_1", msgs(t, "in3", 1), msgs(t, "out3", 1))

	got, err := s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "context of resp_2", err)
	checkItems(t, "context of resp_2", got, concat(seed, in1, out1, direct, in2))
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "context of resp_1", err)
	checkItems(t, "context of resp_1", got, concat(seed, in1))

	// Only items the conversation still lists precede it.
	noErr(t, "delete item", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "out1_0"}))
	noErr(t, "delete item", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "seed_1"}))
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_2"})
	noErr(t, "context after item deletes", err)
	checkItems(t, "context after item deletes", got, concat(seed[:1], in1, out1[1:], direct, in2))
}

func testContextOwnInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := msgs(t, "in", 2)
	commitTurn(t, s, tenantA, "resp_alone", "", "", in, msgs(t, "out", 1))
	got, err := s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_alone"})
	noErr(t, "context", err)
	checkItems(t, "context without history", got, in)

	// A conversation turn still in progress has appended nothing yet: its own input only.
	createConversation(t, s, tenantA, "conv_1", msgs(t, "seed", 2))
	in2 := msgs(t, "in2", 1)
	beginTurn(t, s, tenantA, "resp_running", "conv_1", in2, now().Add(time.Hour))
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_running"})
	noErr(t, "context in progress", err)
	checkItems(t, "context of a conversation turn in progress", got, in2)

	// Once the conversation is deleted, a committed turn of it keeps its own input only.
	in3 := msgs(t, "in3", 2)
	commitTurn(t, s, tenantA, "resp_done", "", "conv_1", in3, msgs(t, "out3", 1))
	noErr(t, "delete conversation", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1", Now: now()}))
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_done"})
	noErr(t, "context after conversation delete", err)
	checkItems(t, "context after the conversation was deleted", got, in3)
	// Nor does a new conversation of the same id bring anything back.
	createConversation(t, s, tenantA, "conv_1", msgs(t, "new", 1))
	got, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_done"})
	noErr(t, "context after conversation recreate", err)
	checkItems(t, "context after the conversation was recreated", got, in3)
}

func testContextUnknown(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_none"})
	isNotFound(t, "context of an unknown response", err)
	commitTurn(t, s, tenantA, "resp_a", "", "", msgs(t, "in", 1), msgs(t, "out", 1))
	_, err = s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantB, ID: "resp_a"})
	isNotFound(t, "context of another tenant's response", err)
	// A response without input has an empty context, which is not "not found".
	commitTurn(t, s, tenantA, "resp_empty", "", "", nil, msgs(t, "o", 1))
	got, err := s.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tenantA, ID: "resp_empty"})
	noErr(t, "context of a response without input", err)
	if len(got) != 0 {
		t.Errorf("context %v, want empty", ids(got))
	}
}

func testResponseDeleteLiveLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	lease := now().Add(time.Hour)
	in := msgs(t, "in", 2)
	beginTurn(t, s, tenantA, "resp_1", "", in, lease)
	noErr(t, "append", store.AppendEvents(ctx, s, &store.ResponseEventAppendParams{Tenant: tenantA, ResponseID: "resp_1", Events: events(0, 2)}))
	if err := s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_1", Now: now()}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete under a live lease: %v, want ErrConflict", err)
	}
	if err := s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_1"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete under a live lease, zero Now: %v, want ErrConflict", err)
	}
	got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	noErr(t, "get after refused delete", err)
	if got.Status != wire.StatusInProgress {
		t.Errorf("status %s, want in_progress", got.Status)
	}
	checkItems(t, "input after refused delete", inputOf(t, s, tenantA, "resp_1"), in)
	checkEvents(t, "events after refused delete", listEvents(t, s, tenantA, "resp_1", -1, 0), events(0, 2))
	// Queued counts as unfinished too.
	q := newResponse(tenantA, "resp_q", "", "", wire.StatusQueued)
	noErr(t, "begin queued", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: q, LeaseOwner: "w", LeaseExpiresAt: lease}))
	if err := s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_q", Now: now()}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete of a queued response under a live lease: %v, want ErrConflict", err)
	}
	// Once the lease has expired at Now, the delete goes through.
	noErr(t, "delete after the lease", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_1", Now: lease.Add(time.Second)}))
	_, _, err = s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_1"})
	isNotFound(t, "get after delete", err)
	noErr(t, "delete queued after the lease", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_q", Now: lease.Add(time.Second)}))
	countItems(t, s, tenantA, 0)
	isNotFound(t, "delete of an unknown response", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_none", Now: now()}))
}

func testConversationDeleteLiveTurn(t *testing.T, s store.Store) {
	ctx := t.Context()
	seed := msgs(t, "seed", 2)
	createConversation(t, s, tenantA, "conv_1", seed)
	lease := now().Add(time.Hour)
	noErr(t, "acquire", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_1", ExpiresAt: lease}))
	if err := s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1", Now: now()}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete while a turn holds the lease: %v, want ErrConflict", err)
	}
	if err := s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete while a turn holds the lease, zero Now: %v, want ErrConflict", err)
	}
	checkItems(t, "items after refused delete", conversationItems(t, s, tenantA, "conv_1"), seed)
	countItems(t, s, tenantA, 2)
	// The lease expires at Now: the delete goes through.
	noErr(t, "delete after the lease", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1", Now: lease.Add(time.Second)}))
	countItems(t, s, tenantA, 0)

	// Released: the delete goes through at once.
	createConversation(t, s, tenantA, "conv_2", nil)
	noErr(t, "acquire", s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_2", ResponseID: "resp_2", ExpiresAt: lease}))
	noErr(t, "release", s.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{Tenant: tenantA, ConversationID: "conv_2", ResponseID: "resp_2"}))
	noErr(t, "delete after release", s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_2", Now: now()}))
	_, err := s.ConversationGet(ctx, &store.ConversationGetParams{Tenant: tenantA, ID: "conv_2"})
	isNotFound(t, "get after delete", err)
}

func testTurnExtend(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	turn := func(resp string, exp time.Time) *store.ConversationTurnAcquireParams {
		return &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: resp, ExpiresAt: exp}
	}
	// A free lease is never taken by extend.
	isNotFound(t, "extend of a free lease", s.ConversationTurnExtend(ctx, turn("resp_1", now().Add(time.Hour))))
	noErr(t, "acquire after a refused extend", s.ConversationTurnAcquire(ctx, turn("resp_2", now().Add(time.Hour))))
	noErr(t, "release", s.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_2"}))

	// The holder moves its lease forward: a lease about to expire holds on after extend.
	noErr(t, "acquire", s.ConversationTurnAcquire(ctx, turn("resp_1", now().Add(-time.Millisecond))))
	noErr(t, "extend by the holder", s.ConversationTurnExtend(ctx, turn("resp_1", now().Add(time.Hour))))
	if err := s.ConversationTurnAcquire(ctx, turn("resp_2", now().Add(time.Hour))); !errors.Is(err, store.ErrConflict) {
		t.Errorf("acquire by another after the holder extended: %v, want ErrConflict", err)
	}
	if err := s.ConversationDelete(ctx, &store.ConversationDeleteParams{Tenant: tenantA, ID: "conv_1", Now: now().Add(30 * time.Minute)}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("delete before the extended expiry: %v, want ErrConflict", err)
	}
	isNotFound(t, "extend by a non-holder", s.ConversationTurnExtend(ctx, turn("resp_2", now().Add(2*time.Hour))))

	// Released: extend is not found and another response may acquire.
	noErr(t, "release", s.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_1"}))
	isNotFound(t, "extend after release", s.ConversationTurnExtend(ctx, turn("resp_1", now().Add(time.Hour))))
	noErr(t, "acquire by another after release", s.ConversationTurnAcquire(ctx, turn("resp_2", now().Add(time.Hour))))
	isNotFound(t, "extend by the former holder", s.ConversationTurnExtend(ctx, turn("resp_1", now().Add(time.Hour))))

	// Expired and retaken: the old holder cannot extend it back.
	noErr(t, "shorten", s.ConversationTurnExtend(ctx, turn("resp_2", now().Add(-time.Millisecond))))
	noErr(t, "retake", s.ConversationTurnAcquire(ctx, turn("resp_3", now().Add(time.Hour))))
	isNotFound(t, "extend by the holder whose lease was retaken", s.ConversationTurnExtend(ctx, turn("resp_2", now().Add(time.Hour))))

	isNotFound(t, "extend on an unknown conversation", s.ConversationTurnExtend(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_none", ResponseID: "resp_3", ExpiresAt: now().Add(time.Hour)}))
	isNotFound(t, "extend of another tenant's lease", s.ConversationTurnExtend(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantB, ConversationID: "conv_1", ResponseID: "resp_3", ExpiresAt: now().Add(time.Hour)}))
}

func testFailedCommitReleasesTurn(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", nil)
	acquire := func(resp string) error {
		return s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1",
			ResponseID: resp, ExpiresAt: now().Add(time.Hour)})
	}
	noErr(t, "acquire", acquire("resp_1"))
	begun := beginTurn(t, s, tenantA, "resp_1", "conv_1", []wire.Item{msg(t, "in_1", "hi")}, now().Add(time.Hour))
	final := finalOf(begun)
	final.Status = wire.StatusFailed
	noErr(t, "commit releasing the turn", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: final, Begun: true, ReleaseTurn: "conv_1"}))
	noErr(t, "acquire after the commit released the turn", acquire("resp_2"))
	if items := conversationItems(t, s, tenantA, "conv_1"); len(items) != 0 {
		t.Errorf("a releasing commit appended %d items", len(items))
	}
	// A commit of a response that does not hold the lease leaves the holder's lease alone.
	begun = beginTurn(t, s, tenantA, "resp_3", "conv_1", []wire.Item{msg(t, "in_3", "hi")}, now().Add(time.Hour))
	final = finalOf(begun)
	final.Status = wire.StatusFailed
	noErr(t, "commit of a non-holder", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: final, Begun: true, ReleaseTurn: "conv_1"}))
	if err := acquire("resp_4"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("acquire after a non-holder's releasing commit: %v, want ErrConflict", err)
	}
}
