// Package storetest is the conformance suite every store.Store backend runs (docs/style.md, "Store contract
// and conformance"), plus benchmark helpers. It lives in a non-test file so each backend's tests
// call the same code; backend quirks belong in the backend's newStore function, never in forked
// tests. It must not depend on any backend.
package storetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// Exercise runs the conformance suite against the backend newStore builds. newStore must return
// a fresh, empty, migrated store private to t (and close it in t.Cleanup); every subtest runs in
// parallel with its own store. The backend must also implement ItemCounter.
func Exercise(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, tc := range slices.Concat(cases, turnCases, replayCases, lineageCases, compactionCases, backgroundCases, replicaCases, adminCases) {
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
	{"an append refuses an id the conversation lists with other content", testAppendRefusesAnIDWithOtherContent},
	{"of concurrent appends of one id with different content exactly one is stored", testConcurrentAppendsOfOneID},
	{"a turn's lease keeps its client-id input from being added with other content", testTurnItemsGuardTheConversation},
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
