package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// appendItems is ConversationItemAppend of items to tenantA's conversation.
func appendItems(t *testing.T, s store.Store, conv string, items ...wire.Item) error {
	t.Helper()
	return s.ConversationItemAppend(t.Context(), &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: conv, Items: items})
}

// isItemIDConflict checks that err is ConversationItemAppend's refusal of items[index] for an
// item the conversation lists (or an earlier item of the call).
func isItemIDConflict(t *testing.T, what string, err error, index int) {
	t.Helper()
	isConflictOf(t, what, err, index, false)
}

// isConflictOf checks that err is an ItemIDConflictError of items[index], that is ErrConflict,
// with InTurn as given.
func isConflictOf(t *testing.T, what string, err error, index int, inTurn bool) {
	t.Helper()
	var ce *store.ItemIDConflictError
	if !errors.As(err, &ce) || ce.Index != index || ce.InTurn != inTurn || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: %v, want an ItemIDConflictError for item %d (InTurn %v) that is ErrConflict", what, err, index, inTurn)
	}
}

// An append never gives a conversation a second item with an id it lists with other content
// (issue 38 item 3): such an id, against a listed item or an earlier item of the same call, is
// an ItemIDConflictError naming the item, and nothing of the call is appended. The sequence
// check-check-append-append is the race of two callers that both looked the id up before either
// appended (server/conversations.go dedupeItems): the second append, whose caller saw no such id,
// is the one refused. A repeat with the same content (whitespace aside) is not a conflict.
func testAppendRefusesAnIDWithOtherContent(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", msgs(t, "i", 2))
	before := func(what string, want []wire.Item) {
		t.Helper()
		all, err := s.ConversationItemsAll(ctx, &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
		noErr(t, "all", err)
		checkItems(t, what, all, want)
	}
	seed := msgs(t, "i", 2)
	isItemIDConflict(t, "a listed id with other content", appendItems(t, s, "conv_1", msg(t, "new_0", "new"), msg(t, "i_1", "changed")), 1)
	isItemIDConflict(t, "one id twice in a call", appendItems(t, s, "conv_1", msg(t, "new_1", "a"), msg(t, "new_1", "b")), 1)
	before("after refused appends", seed)

	for _, who := range []string{"first", "second"} {
		_, err := s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "race"})
		isNotFound(t, who+" caller's look-up of the id", err)
	}
	won := msg(t, "race", "the first caller's")
	noErr(t, "the first caller's append", appendItems(t, s, "conv_1", won))
	isItemIDConflict(t, "the second caller's append", appendItems(t, s, "conv_1", msg(t, "race", "the second caller's")), 0)
	got, err := s.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tenantA, ConversationID: "conv_1", ItemID: "race"})
	noErr(t, "get the raced id", err)
	checkItems(t, "the raced id", []wire.Item{got}, []wire.Item{won})

	spaced := mustItem(t, strings.ReplaceAll(string(seed[0].JSON), ",", ", "))
	noErr(t, "a repeat with the same content", appendItems(t, s, "conv_1", spaced))
	before("after the repeat", append(append(seed, won), spaced))
}

// Concurrent appends of one new id with different content: whatever the interleaving, exactly one
// is stored and every other call is refused, because each backend checks under the
// conversation's lock in the appending transaction.
func testConcurrentAppendsOfOneID(t *testing.T, s store.Store) {
	const callers = 8
	createConversation(t, s, tenantA, "conv_1", nil)
	items := make([]wire.Item, callers)
	for i := range items {
		items[i] = msg(t, "same", fmt.Sprintf("caller %d", i))
	}
	start := make(chan struct{})
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			errs[i] = s.ConversationItemAppend(t.Context(), &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: "conv_1", Items: items[i : i+1]})
		})
	}
	close(start)
	wg.Wait()
	stored := 0
	for i, err := range errs {
		if err == nil {
			stored++
			continue
		}
		isItemIDConflict(t, fmt.Sprintf("caller %d", i), err, 0)
	}
	all, err := s.ConversationItemsAll(t.Context(), &store.ConversationItemsAllParams{Tenant: tenantA, ConversationID: "conv_1"})
	noErr(t, "all", err)
	if stored != 1 || len(all) != 1 {
		t.Fatalf("%d calls succeeded and the conversation holds %v, want exactly one item", stored, ids(all))
	}
}

// A conversation's turn lease keeps the turn's input items that carry client ids, which its
// commit will append (issue 38 item 3, an items add racing a running turn). Acquiring refuses an
// id the conversation lists with other content (an add since the turn read the conversation) and
// takes nothing; while the lease is live an append of one of the turn's ids with other content
// is refused (InTurn); the same content, other ids, a released or expired lease refuse nothing.
func testTurnItemsGuardTheConversation(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_1", msgs(t, "i", 1))
	hour := now().Add(time.Hour)
	acquire := func(resp string, exp time.Time, items ...wire.Item) error {
		return s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1",
			ResponseID: resp, ExpiresAt: exp, Items: items})
	}
	release := func(resp string) {
		t.Helper()
		noErr(t, "release "+resp, s.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: resp}))
	}
	isItemIDConflict(t, "acquire with a listed id and other content",
		acquire("resp_1", hour, msg(t, "x", "x"), msg(t, "i_0", "changed")), 1)
	noErr(t, "another turn acquires: the refused acquire took no lease", acquire("resp_2", hour))
	release("resp_2")

	noErr(t, "acquire with a listed item as listed", acquire("resp_1", hour, msgs(t, "i", 1)[0], msg(t, "turn", "the turn's"), msg(t, "t2", "the turn's")))
	isConflictOf(t, "append of the turn's id with other content",
		appendItems(t, s, "conv_1", msg(t, "new", "n"), msg(t, "t2", "other")), 1, true)
	noErr(t, "append of the turn's item as the turn holds it", appendItems(t, s, "conv_1", msg(t, "turn", "the turn's")))
	noErr(t, "append of another id", appendItems(t, s, "conv_1", msg(t, "new", "n")))
	checkItems(t, "while the turn runs", conversationItems(t, s, tenantA, "conv_1"),
		[]wire.Item{msgs(t, "i", 1)[0], msg(t, "turn", "the turn's"), msg(t, "new", "n")})

	release("resp_1")
	noErr(t, "append of the released turn's id", appendItems(t, s, "conv_1", msg(t, "t2", "other")))
	noErr(t, "acquire with a lease that has expired", acquire("resp_3", now().Add(-time.Millisecond), msg(t, "t3", "the turn's")))
	noErr(t, "append of the expired turn's id", appendItems(t, s, "conv_1", msg(t, "t3", "other")))
	// The next holder's lease keeps its own items only.
	noErr(t, "acquire by the next turn", acquire("resp_4", hour, msg(t, "t4", "the turn's")))
	noErr(t, "append of the former turn's id", appendItems(t, s, "conv_1", msg(t, "t5", "other")))
	isConflictOf(t, "append of the holder's id", appendItems(t, s, "conv_1", msg(t, "t4", "other")), 0, true)
	noErr(t, "extend keeps the items", s.ConversationTurnExtend(ctx, &store.ConversationTurnAcquireParams{Tenant: tenantA, ConversationID: "conv_1", ResponseID: "resp_4", ExpiresAt: hour}))
	isConflictOf(t, "append of the holder's id after extend", appendItems(t, s, "conv_1", msg(t, "t4", "other")), 0, true)
}
