package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/respgate/respgate/store"
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
		st := realStore(t, newStore)
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

// turnGateStore is a real store that holds the first conversation turn at one step (gate:
// "acquire", before ConversationTurnAcquire; "commit", before ResponseCommit) until the test
// lets it go: reached is closed when the turn arrives, and the turn waits for proceed.
type turnGateStore struct {
	store.Store
	store.Jobs

	gate             string
	once             sync.Once
	reached, proceed chan struct{}
}

func (s *turnGateStore) hold(ctx context.Context, step string) error {
	if step != s.gate {
		return nil
	}
	held := false
	s.once.Do(func() { held = true })
	if !held {
		return nil
	}
	close(s.reached)
	select {
	case <-s.proceed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *turnGateStore) ConversationTurnAcquire(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	if err := s.hold(ctx, "acquire"); err != nil {
		return err
	}
	return s.Store.ConversationTurnAcquire(ctx, p)
}

func (s *turnGateStore) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	if err := s.hold(ctx, "commit"); err != nil {
		return err
	}
	return s.Store.ResponseCommit(ctx, p)
}

// A POST …/items of an id that a running conversation turn's input carries, with other content,
// leaves the conversation with one item of that id (issue 38 item 3, the race with a turn): added
// after the turn read the conversation but before it took the lease, the turn is refused (400
// item_id_conflict naming input) and the added item stays; added while the turn runs (held at its
// commit), the add is refused (400 item_id_conflict naming items[0]) and the turn stores its
// input. The gates are store calls held open, not timing. Before, both were stored.
func TestAnItemsAddRacingATurnLeavesOneItemOfTheID(t *testing.T) {
	for _, gate := range []string{"acquire", "commit"} {
		t.Run(gate, func(t *testing.T) {
			backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
				st := realStore(t, newStore)
				gs := &turnGateStore{Store: st, Jobs: st.(store.Jobs), gate: gate, reached: make(chan struct{}), proceed: make(chan struct{})}
				g := newGateway(t, gs)
				conv := newConversation(t, g, `{}`)
				turnBody := fmt.Sprintf(`{"model":%q,"conversation":%q,"input":[{"type":"message","id":%q,"role":"user","content":"the turn's"}]}`,
					harmony, conv, raceID)
				turn := make(chan postAnswer, 1)
				go func() { turn <- post(t.Context(), g.URL+"/responses", turnBody) }()
				select {
				case <-gs.reached:
				case a := <-turn:
					t.Fatalf("the turn ended before its %s: %d %s", gate, a.status, a.body)
				}
				add := post(t.Context(), g.URL+"/conversations/"+conv+"/items",
					`{"items":[{"type":"message","id":"`+raceID+`","role":"user","content":"the add's"}]}`)
				close(gs.proceed)
				done := <-turn

				want := "the add's"
				switch gate {
				case "acquire":
					if add.status != http.StatusOK {
						t.Fatalf("add before the lease: %d %s, want 200", add.status, add.body)
					}
					if _, code, param, _ := envelope(t, []byte(done.body)); done.status != http.StatusBadRequest || code != "item_id_conflict" || param != "input" {
						t.Fatalf("turn: %d %s, want 400 item_id_conflict naming input", done.status, done.body)
					}
				case "commit":
					if _, code, param, msg := envelope(t, []byte(add.body)); add.status != http.StatusBadRequest || code != "item_id_conflict" ||
						param != "items[0]" || !strings.Contains(msg, "in progress") {
						t.Fatalf("add during the turn: %d %s, want 400 item_id_conflict naming items[0] and the response in progress", add.status, add.body)
					}
					if done.status != http.StatusOK {
						t.Fatalf("turn: %d %s, want 200", done.status, done.body)
					}
					want = "the turn's"
				}
				var n int
				for _, it := range allItems(t, g, conv, "asc") {
					if it.ID == raceID {
						n++
						if !strings.Contains(it.RawJSON(), want) {
							t.Errorf("%s holds %s, want %q", raceID, it.RawJSON(), want)
						}
					}
				}
				if n != 1 {
					t.Fatalf("the conversation holds %d items %s, want 1", n, raceID)
				}
				// The conversation is free: a next turn on it runs.
				if a := post(t.Context(), g.URL+"/responses", fmt.Sprintf(`{"model":%q,"conversation":%q,"input":"next"}`, harmony, conv)); a.status != http.StatusOK {
					t.Fatalf("next turn: %d %s", a.status, a.body)
				}
			})
		})
	}
}
