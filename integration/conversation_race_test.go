package integration

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/wire"
)

// raceID is the item id the two calls of TestConcurrentItemAddsOfOneIDStoreOne both add.
const raceID = "msg_race"

// lookupBarrierStore is a real store that holds every append of raceID until two look-ups of
// raceID (the conversations door's check, server/conversations.go dedupeItems) have returned:
// both calls check before either appends, the interleaving that let both through before.
type lookupBarrierStore struct {
	store.Store
	store.Jobs

	mu     sync.Mutex
	looked int
	both   chan struct{} // closed at the second look-up of raceID
}

func (s *lookupBarrierStore) ConversationItemGet(ctx context.Context, p *store.ConversationItemGetParams) (wire.Item, error) {
	it, err := s.Store.ConversationItemGet(ctx, p)
	if p.ItemID == raceID {
		s.mu.Lock()
		if s.looked++; s.looked == 2 {
			close(s.both)
		}
		s.mu.Unlock()
	}
	return it, err
}

func (s *lookupBarrierStore) ConversationItemAppend(ctx context.Context, p *store.ConversationItemAppendParams) error {
	if slices.ContainsFunc(p.Items, func(it wire.Item) bool { return it.ID == raceID }) {
		select {
		case <-s.both:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.ConversationItemAppend(ctx, p)
}

// Two concurrent POST /v1/conversations/{id}/items adding one new id with different content,
// both past the door's look-up before either appends (a barrier, not timing): exactly one is
// stored, the other is 400 item_id_conflict naming items[0], as the same call made afterwards
// is, and GET of the id answers the stored one (issue 38 item 3). Before, both were stored.
func TestConcurrentItemAddsOfOneIDStoreOne(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		if st == nil {
			sq, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "respgate.db"))
			if err != nil {
				t.Fatalf("open sqlite: %v", err)
			}
			t.Cleanup(func() { _ = sq.Close() })
			st = sq
		}
		g := newGateway(t, &lookupBarrierStore{Store: st, Jobs: st.(store.Jobs), both: make(chan struct{})})
		conv := newConversation(t, g, `{}`)
		texts := []string{"the first caller's", "the second caller's"}
		answers := make([]postAnswer, len(texts))
		var wg sync.WaitGroup
		for i, text := range texts {
			wg.Go(func() {
				body := `{"items":[{"type":"message","id":"` + raceID + `","role":"user","content":"` + text + `"}]}`
				answers[i] = post(t.Context(), g.URL+"/conversations/"+conv+"/items", body)
			})
		}
		wg.Wait()
		var won string
		refused := 0
		for i, a := range answers {
			switch a.status {
			case http.StatusOK:
				won = texts[i]
			case http.StatusBadRequest:
				if _, code, param, _ := envelope(t, []byte(a.body)); code != "item_id_conflict" || param != "items[0]" {
					t.Fatalf("caller %d: %d %s, want item_id_conflict naming items[0]", i, a.status, a.body)
				}
				refused++
			default:
				t.Fatalf("caller %d: %d %s", i, a.status, a.body)
			}
		}
		if won == "" || refused != 1 {
			t.Fatalf("answers %+v: want one stored and one refused", answers)
		}
		items := allItems(t, g, conv, "asc")
		if len(items) != 1 || items[0].ID != raceID || !strings.Contains(items[0].RawJSON(), won) {
			t.Fatalf("the conversation holds %s, want only %s with %q", itemSummary(items), raceID, won)
		}
	})
}

// postAnswer is a status and body post received.
type postAnswer struct {
	status int
	body   string
}

// post sends body to url as the test key, from any goroutine (it never fails the test); a
// transport failure is status 0 with its text.
func post(ctx context.Context, url, body string) (a postAnswer) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		a.body = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer test-key")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.body = err.Error()
		return a
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a.status, a.body = res.StatusCode, string(b)
	return a
}
