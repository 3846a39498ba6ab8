// Package storetest is the conformance suite every store.Store backend runs (docs/style.md, "Store contract
// and conformance"), plus benchmark helpers. It lives in a non-test file so each backend's tests
// call the same code; backend quirks belong in the backend's newStore function, never in forked
// tests. It must not depend on any backend.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// Exercise runs the conformance suite against the backend newStore builds. newStore must return
// a fresh, empty, migrated store private to t (and close it in t.Cleanup); every subtest runs in
// parallel with its own store. The backend must also implement ItemCounter.
func Exercise(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, tc := range slices.Concat(cases, turnCases, replayCases, lineageCases, compactionCases, backgroundCases, adminCases) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t))
		})
	}
}

// storeCase is one named case of the shared suite, run against a fresh store of each backend.
type storeCase struct {
	name string
	run  func(t *testing.T, s store.Store)
}

var cases = []storeCase{
	{"ping answers", testPing},
	{"odd items round-trip verbatim through every read", testItemFidelity},
	{"a 1 MiB item round-trips verbatim", testLargeItem},
	{"a response record round-trips", testResponseRecord},
	{"commit without begin stores the response", testCommitWithoutBegin},
	{"commit after begin finishes the in-progress response and ends its lease", testCommitAfterBegin},
	{"committing an already terminal response changes nothing", testCommitIdempotent},
	{"commit rejects a non-terminal status", testCommitNeedsTerminal},
	{"commit into an unknown conversation stores nothing", testCommitAtomic},
	{"begin of an existing id is a conflict", testBeginConflict},
	{"begin stores in_progress by default and rejects a status other than in_progress or queued", testBeginStatus},
	{"lease extend needs the owner and an unfinished response", testLeaseExtend},
	{"sweep fails unfinished responses whose lease expired", testSweep},
	{"purge deletes old terminal responses of every tenant and keeps conversation items", testPurge},
	{"chain of depth 1000 loads oldest first in one call", testChainDeep},
	{"chain names a deleted ancestor as missing", testChainMissing},
	{"chain of an unknown response is not found", testChainUnknown},
	{"storage per turn is proportional to the turn's items", testStoragePerTurn},
	{"item get returns the most recent item with that id", testItemGetMostRecent},
	{"item get many returns the most recent item per id and leaves out unknown ones", testItemGetMany},
	{"response items page in both orders", testResponseItemPages},
	{"conversation items page in both orders", testConversationItemPages},
	{"an unknown cursor is not found", testUnknownCursor},
	{"lists reject an unknown order, and response item lists an unknown role", testListArguments},
	{"conversation metadata is an object and updates replace it", testConversationMetadata},
	{"conversation create of an existing id is a conflict", testConversationConflict},
	{"conversation item get and delete", testConversationItemGetDelete},
	{"commit appends input then output to the conversation", testCommitAppendsToConversation},
	{"concurrent commits and appends keep a conversation in order without loss", testConcurrentConversation},
	{"turn lease conflicts until released or expired", testTurnLease},
	{"commit releases the conversation turn lease", testCommitReleasesTurn},
	{"response delete keeps items a conversation lists", testResponseDelete},
	{"conversation delete keeps response items and removes its own", testConversationDelete},
	{"every read and delete of another tenant is not found and changes nothing", testTenantIsolation},
	{"concurrent secret callers get the same value", testSecret},
	{"the generated seal key is kept byte for byte beside the tenant secret", testSealKeySecret},
}

func testPing(t *testing.T, s store.Store) {
	noErr(t, "ping", s.Ping(t.Context()))
	_, _, err := s.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: tenantA, ID: "resp_none"})
	isNotFound(t, "get of a never stored response", err)
}

// oddItems are items whose JSON a careless store would change.
func oddItems(t testing.TB) []wire.Item {
	raws := []string{
		// Unknown type, unknown fields, nulls, nesting, empty containers.
		`{"type":"x_vendor_thing","id":"x_1","weird":{"a":[1,[2,[3,null]],{"b":null}]},"nothing":null,"empty_obj":{},"empty_arr":[],"t":true,"f":false}`,
		// Reasoning with every member, including encrypted_content and an explicit null.
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"think \"hard\""}],"encrypted_content":"gAAAAABo0+/=","status":null}`,
		// Unicode: raw multi-byte and astral characters, escaped surrogate pairs, every escape.
		`{"id":"msg_u","type":"message","role":"user","content":[{"type":"input_text","text":"héllo 世界 🎉𝄞 \u00e9 \ud83d\ude00 \n\t\"\\\/\b\f\r \u0000 \u001f <>& \u003c\u2028"}]}`,
		// Numbers as written: 1.0 vs 1, integers beyond float64 and int64, exponents, -0.
		`{"id":"n_1","type":"x_numbers","a":1.0,"b":1,"c":12345678901234567890,"d":-0,"e":1e-7,"f":1E+2,"g":0.1,"h":123456789012345678901234567890.5}`,
		// Whitespace, key order and a duplicate key exactly as sent.
		"{ \"type\" : \"message\",\n \"id\":\"msg_ws\", \"z\":1,\t\"a\":2, \"k\":1, \"k\":2 }",
		// A function call whose arguments are JSON in a string.
		`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"lookup","arguments":"{\"q\":\"a\\\"b\",\"n\":[1,2]}","status":"completed"}`,
		// An easy-form message without id or type.
		`{"role":"user","content":"hi"}`,
		// Deeply nested arrays.
		`{"id":"deep","type":"x_deep","v":[[[[[[[[[[[[[[[[[[[[["bottom"]]]]]]]]]]]]]]]]]]]]]}`,
	}
	out := make([]wire.Item, len(raws))
	for i, r := range raws {
		out[i] = mustItem(t, r)
	}
	return out
}

func testItemFidelity(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := oddItems(t)
	out := oddItems(t)[:6]
	createConversation(t, s, tenantA, "conv_odd", nil)
	commitTurn(t, s, tenantA, "resp_odd", "", "conv_odd", in, out)

	_, gotOut, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_odd"})
	noErr(t, "response get", err)
	checkItems(t, "response get output", gotOut, out)

	for _, role := range []struct {
		name string
		want []wire.Item
	}{{store.RoleInput, in}, {store.RoleOutput, out}} {
		page, err := s.ItemListByResponse(ctx, &store.ItemListByResponseParams{
			Tenant: tenantA, ResponseID: "resp_odd", Role: role.name, Limit: 100, Order: store.OrderAsc,
		})
		noErr(t, "item list "+role.name, err)
		checkItems(t, "item list "+role.name, page.Items, role.want)
	}

	chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "resp_odd"})
	noErr(t, "chain get", err)
	checkItems(t, "chain", chain.Items(), concat(in, out))

	all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_odd"})
	noErr(t, "conversation items all", err)
	checkItems(t, "conversation items all", all, concat(in, out))

	page, err := s.ConversationItemList(ctx, &store.ConversationItemListParams{Tenant: tenantA, ConversationID: "conv_odd", Limit: 100, Order: store.OrderAsc})
	noErr(t, "conversation item list", err)
	checkItems(t, "conversation item list", page.Items, concat(in, out))

	for _, want := range out {
		got, err := s.ItemGet(ctx, &store.ItemGetParams{Tenant: tenantA, ID: want.ID})
		noErr(t, "item get "+want.ID, err)
		checkItems(t, "item get", []wire.Item{got}, []wire.Item{want})
		got, err = s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tenantA, ConversationID: "conv_odd", ItemID: want.ID})
		noErr(t, "conversation item get "+want.ID, err)
		checkItems(t, "conversation item get", []wire.Item{got}, []wire.Item{want})
	}

	// Items created directly in a conversation keep their bytes too.
	createConversation(t, s, tenantA, "conv_direct", in)
	all, err = s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_direct"})
	noErr(t, "conversation items all", err)
	checkItems(t, "conversation created with items", all, in)
}

func testLargeItem(t *testing.T, s store.Store) {
	// 1 MiB of text mixing ASCII, escapes and multi-byte characters.
	var b strings.Builder
	b.WriteString(`{"id":"msg_big","type":"message","role":"assistant","content":[{"type":"output_text","text":"`)
	chunk := `lorem ipsum \"quoted\" \n é 世 🎉 `
	for b.Len() < 1<<20 {
		b.WriteString(chunk)
	}
	b.WriteString(`"}],"status":"completed"}`)
	big := mustItem(t, b.String())
	commitTurn(t, s, tenantA, "resp_big", "", "", []wire.Item{msg(t, "msg_in", "hi")}, []wire.Item{big})
	_, out, err := s.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: tenantA, ID: "resp_big"})
	noErr(t, "response get", err)
	checkItems(t, "1 MiB output", out, []wire.Item{big})
	got, err := s.ItemGet(t.Context(), &store.ItemGetParams{Tenant: tenantA, ID: "msg_big"})
	noErr(t, "item get", err)
	checkItems(t, "1 MiB item get", []wire.Item{got}, []wire.Item{big})
}

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
