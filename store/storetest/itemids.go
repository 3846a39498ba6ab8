package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// appendItems is ConversationItemAppend of items to tenantA's conversation.
func appendItems(t *testing.T, s store.Store, conv string, items ...wire.Item) error {
	t.Helper()
	return s.ConversationItemAppend(t.Context(), &store.ConversationItemAppendParams{Tenant: tenantA, ConversationID: conv, Items: items})
}

// isItemIDConflict checks that err is ConversationItemAppend's refusal of items[index].
func isItemIDConflict(t *testing.T, what string, err error, index int) {
	t.Helper()
	var ce *store.ItemIDConflictError
	if !errors.As(err, &ce) || ce.Index != index || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: %v, want an ItemIDConflictError for item %d that is ErrConflict", what, err, index)
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
