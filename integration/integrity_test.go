package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
)

// rawEvent is one SSE event as it crossed the wire.
type rawEvent struct {
	Type string
	Seq  int64
	Data string
}

// liveStream is a streamed POST /v1/responses read event by event with a raw reader, so a test
// can act between events and compare bytes with a replay.
type liveStream struct {
	res *http.Response
	sc  *bufio.Scanner
	ID  string
	All []rawEvent
}

func openLive(t *testing.T, g *gw, body string) *liveStream {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", g.URL+"/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer test-key")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		t.Fatalf("stream status %d", res.StatusCode)
	}
	t.Cleanup(func() { res.Body.Close() })
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	return &liveStream{res: res, sc: sc}
}

// next returns the next event, or false at [DONE] or the end of the body.
func (l *liveStream) next(t *testing.T) (rawEvent, bool) {
	t.Helper()
	ev, ok := readSSE(t, l.sc)
	if ok {
		if l.ID == "" {
			var v struct{ Response struct{ ID string } }
			_ = json.Unmarshal([]byte(ev.Data), &v)
			l.ID = v.Response.ID
		}
		l.All = append(l.All, ev)
	}
	return ev, ok
}

// until reads events until one of type typ (suffix match) has been read.
func (l *liveStream) until(t *testing.T, suffix string) {
	t.Helper()
	for {
		ev, ok := l.next(t)
		if !ok {
			t.Fatalf("stream ended before a %s event", suffix)
		}
		if strings.HasSuffix(ev.Type, suffix) {
			return
		}
	}
}

func (l *liveStream) drain(t *testing.T) rawEvent {
	t.Helper()
	for {
		if _, ok := l.next(t); !ok {
			break
		}
	}
	if len(l.All) == 0 {
		t.Fatal("empty stream")
	}
	return l.All[len(l.All)-1]
}

func readSSE(t *testing.T, sc *bufio.Scanner) (rawEvent, bool) {
	t.Helper()
	var ev rawEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && ev.Data != "":
			var v struct {
				Seq int64 `json:"sequence_number"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
				t.Fatalf("event data is not JSON: %v", err)
			}
			ev.Seq = v.Seq
			return ev, true
		case line == "data: [DONE]":
			return ev, false
		case strings.HasPrefix(line, "event: "):
			ev.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.Data = line[6:]
		}
	}
	return ev, false
}

func readAllSSE(t *testing.T, body string) []rawEvent {
	t.Helper()
	if !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("replay does not end with [DONE]: ...%s", body[max(0, len(body)-80):])
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var out []rawEvent
	for {
		ev, ok := readSSE(t, sc)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// sameEvents asserts that got are exactly want: same types, sequence numbers and JSON.
func sameEvents(t *testing.T, got, want []rawEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].Seq != want[i].Seq || !jsonEqual(got[i].Data, want[i].Data) {
			t.Fatalf("event %d differs:\n got %s %d %s\nwant %s %d %s", i, got[i].Type, got[i].Seq, got[i].Data,
				want[i].Type, want[i].Seq, want[i].Data)
		}
	}
}

func TestDeletingAResponseWhileItStreamsIsRefusedUntilItFinishes(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		live := openLive(t, g, `{"model":"`+harmony+`?delay_ms=20&tokens=40","input":"hi","stream":true}`)
		live.until(t, ".delta")
		status, body, _ := rawDo(t, "DELETE", g.URL+"/responses/"+live.ID, "", "Authorization", "Bearer test-key")
		if _, code, param, _ := envelope(t, body); status != 409 || code != "response_in_progress" || param != "response_id" {
			t.Fatalf("delete mid-stream: %d %s", status, body)
		}
		if last := live.drain(t); last.Type != "response.completed" {
			t.Fatalf("stream ended with %s", last.Type)
		}
		if r, err := g.client.Responses.Get(t.Context(), live.ID, responsesGetParams()); err != nil || r.Status != "completed" {
			t.Fatalf("get after the refused delete: %v", err)
		}
		if status, body, _ = rawDo(t, "DELETE", g.URL+"/responses/"+live.ID, "", "Authorization", "Bearer test-key"); status != 200 {
			t.Fatalf("delete after it finished: %d %s", status, body)
		}
		if status, _, _ = rawDo(t, "GET", g.URL+"/responses/"+live.ID, "", "Authorization", "Bearer test-key"); status != 404 {
			t.Fatalf("get after delete: %d", status)
		}
	})
}

func TestACommitNeverResurrectsAResponseDeletedAfterItsLeaseExpired(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		live := openLive(t, g, `{"model":"`+harmony+`?delay_ms=20&tokens=40","input":"hi","stream":true}`)
		live.until(t, ".delta")
		// A delete that found the lease expired (as after a store outage): the store lets it
		// through. The turn's commit must not bring the response back.
		err := g.Store.ResponseDelete(t.Context(), &store.ResponseDeleteParams{Tenant: g.Server.TenantOf("test-key"),
			ID: live.ID, Now: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		last := live.drain(t)
		var term struct {
			Response struct {
				Status string
				Error  struct{ Code string }
			}
		}
		_ = json.Unmarshal([]byte(last.Data), &term)
		if last.Type != "response.failed" || term.Response.Error.Code != "response_deleted" {
			t.Fatalf("terminal event: %s %s", last.Type, last.Data)
		}
		if status, _, _ := rawDo(t, "GET", g.URL+"/responses/"+live.ID, "", "Authorization", "Bearer test-key"); status != 404 {
			t.Fatalf("deleted response came back: GET answers %d", status)
		}
	})
}

func TestDeletingAConversationDuringItsTurnIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		conv := newConversation(t, g, `{}`)
		live := openLive(t, g, `{"model":"`+harmony+`?delay_ms=20&tokens=40","input":"hi","conversation":"`+conv+`","stream":true}`)
		live.until(t, ".delta")
		status, body, _ := rawDo(t, "DELETE", g.URL+"/conversations/"+conv, "", "Authorization", "Bearer test-key")
		if _, code, _, _ := envelope(t, body); status != 409 || code != "conversation_locked" {
			t.Fatalf("delete during the turn: %d %s", status, body)
		}
		if last := live.drain(t); last.Type != "response.completed" {
			t.Fatalf("turn ended %s: %s", last.Type, last.Data)
		}
		r, err := g.client.Responses.Get(t.Context(), live.ID, responsesGetParams())
		if err != nil || r.Status != "completed" {
			t.Fatalf("the turn was not stored: %v", err)
		}
		if status, body, _ = rawDo(t, "DELETE", g.URL+"/conversations/"+conv, "", "Authorization", "Bearer test-key"); status != 200 {
			t.Fatalf("delete after the turn: %d %s", status, body)
		}
	})
}

func TestFinishedConversationTurnsNeverLeaveTheConversationLocked(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		// A lease short enough that the keeper renews it during every turn.
		g := newGateway(t, newStore(t), respgatetest.Options{Server: server.Config{LeaseTTL: 90 * time.Millisecond, WriteTimeout: 60 * time.Millisecond}})
		conv := newConversation(t, g, `{}`)
		for i := range 25 {
			body := fmt.Sprintf(`{"model":"%s?delay_ms=5&tokens=12","input":"turn %d","conversation":%q,"stream":%v}`, harmony, i, conv, i%2 == 0)
			status, resp, _ := rawDo(t, "POST", g.URL+"/responses", body, "Authorization", "Bearer test-key")
			if status != 200 {
				t.Fatalf("turn %d: %d %s", i, status, resp)
			}
		}
	})
}

func TestAFailedCommitIsStoredAsFailedOnceTheStoreIsBack(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := &failingCommits{Store: newStore(t)}
		if st.Store == nil { // SQLite, in the test's temp dir
			sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sq.Close() })
			st.Store = sq
		}
		st.fail.Store(3) // every attempt of the turn's own commit
		g := newGateway(t, st)
		live := openLive(t, g, `{"model":"`+harmony+`","input":"hi","stream":true}`)
		last := live.drain(t)
		if last.Type != "response.failed" || !strings.Contains(last.Data, "could not be stored") {
			t.Fatalf("terminal event: %s %s", last.Type, last.Data)
		}
		// The store is back (the fault was only for three attempts): the record becomes terminal
		// with the true reason, without waiting for a lease to expire.
		var r *responses.Response
		waitFor(t, 10*time.Second, "the failed record", func() bool {
			var err error
			r, err = g.client.Responses.Get(t.Context(), live.ID, responsesGetParams())
			return err == nil && r.Status == "failed"
		})
		if !strings.Contains(r.Error.Message, "could not be stored") || strings.Contains(r.Error.Message, "restart") {
			t.Fatalf("stored reason: %q", r.Error.Message)
		}
	})
}

// failingCommits is a real store whose next ResponseCommit calls fail, as when the database is
// unreachable for a moment.
type failingCommits struct {
	store.Store
	fail atomic.Int32
}

func (f *failingCommits) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	if f.fail.Add(-1) >= 0 {
		return errors.New("connection refused (injected)")
	}
	return f.Store.ResponseCommit(ctx, p)
}

func TestContinuingFromACutResponseReplaysItsInputButNotItsCutText(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		cut := openLive(t, g, `{"model":"`+harmony+`?cut_after=12&tokens=40","input":"remember: the boat is red","stream":true}`)
		if last := cut.drain(t); last.Type != "response.failed" {
			t.Fatalf("cut stream ended %s", last.Type)
		}
		r, err := g.client.Responses.Get(t.Context(), cut.ID, responsesGetParams())
		if err != nil || r.Status != "failed" || len(r.Output) == 0 {
			t.Fatalf("cut response: %v %+v", err, r)
		}
		g.create(t, `{"model":"`+harmony+`","input":"and now?","previous_response_id":"`+cut.ID+`"}`)
		reqs := g.UpstreamRequests()
		input := upstreamInput(t, reqs[len(reqs)-1])
		var texts []string
		for _, it := range input {
			b, _ := json.Marshal(it)
			texts = append(texts, string(b))
			if it["type"] == "message" && it["role"] == "assistant" {
				t.Fatalf("the cut assistant text was replayed as a finished turn: %s", b)
			}
		}
		all := strings.Join(texts, "\n")
		if !strings.Contains(all, "the boat is red") || !strings.Contains(all, "and now?") {
			t.Fatalf("the cut turn's user input was dropped:\n%s", all)
		}
	})
}

func TestGetStreamReplaysTheLiveEventsExactlyAndResumesAfterAnyNumber(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		live := openLive(t, g, fmt.Sprintf(`{"model":%q,"input":"use tools","tools":%s,"stream":true}`, harmony, tools))
		live.drain(t)
		if len(live.All) < 10 {
			t.Fatalf("only %d live events", len(live.All))
		}
		for _, after := range []int{-1, 0, 3, len(live.All) / 2, len(live.All) - 2, len(live.All) - 1} {
			url := g.URL + "/responses/" + live.ID + "?stream=true"
			if after >= 0 {
				url += fmt.Sprintf("&starting_after=%d", after)
			}
			_, body, _ := rawDo(t, "GET", url, "", "Authorization", "Bearer test-key")
			sameEvents(t, readAllSSE(t, string(body)), live.All[after+1:])
		}
	})
}

func TestGetStreamOfAResponseInProgressFollowsItToTheEnd(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		live := openLive(t, g, `{"model":"`+harmony+`?delay_ms=15&tokens=60","input":"hi","stream":true}`)
		live.until(t, ".delta")
		after := len(live.All) - 1
		var replay []rawEvent
		var wg sync.WaitGroup
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("%s/responses/%s?stream=true&starting_after=%d", g.URL, live.ID, after), nil)
			req.Header.Set("Authorization", "Bearer test-key")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			sc := bufio.NewScanner(res.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for {
				ev, ok := readSSE(t, sc)
				if !ok {
					return
				}
				replay = append(replay, ev)
			}
		})
		live.drain(t)
		wg.Wait()
		sameEvents(t, replay, live.All[after+1:])
	})
}

func TestInputItemsListTheWholeContextTheModelSaw(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		a := g.create(t, `{"model":"`+harmony+`","input":"one"}`)
		b := g.create(t, `{"model":"`+harmony+`","input":"two","previous_response_id":"`+a.ID+`"}`)
		var want []string
		for _, it := range a.Output {
			want = append(want, it.ID)
		}
		got := inputItemIDs(t, g, b.ID)
		// a's input, a's output, b's input, oldest first.
		if len(got) != len(a.Output)+2 || got[1] == "" || !equalStrings(got[1:len(got)-1], want) {
			t.Fatalf("input_items of a continuation: %v (a's output %v)", got, want)
		}
		texts := inputItemTexts(t, g, b.ID)
		if texts[0] != "one" || texts[len(texts)-1] != "two" {
			t.Fatalf("input_items order: %v", texts)
		}

		conv := newConversation(t, g, `{}`)
		g.create(t, `{"model":"`+harmony+`","input":"first","conversation":"`+conv+`"}`)
		second := g.create(t, `{"model":"`+harmony+`","input":"second","conversation":"`+conv+`"}`)
		texts = inputItemTexts(t, g, second.ID)
		if texts[0] != "first" || texts[len(texts)-1] != "second" || len(texts) < 3 {
			t.Fatalf("input_items of a conversation turn: %v", texts)
		}
	})
}

func inputItemIDs(t *testing.T, g *gw, id string) []string {
	t.Helper()
	var ids []string
	it := g.client.Responses.InputItems.ListAutoPaging(t.Context(), id, responses.InputItemListParams{Order: responses.InputItemListParamsOrderAsc})
	for it.Next() {
		ids = append(ids, it.Current().ID)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// inputItemTexts lists the texts of the input items in order (empty for non-messages), paging
// two at a time so that the cursor is exercised.
func inputItemTexts(t *testing.T, g *gw, id string) []string {
	t.Helper()
	var texts []string
	it := g.client.Responses.InputItems.ListAutoPaging(t.Context(), id, responses.InputItemListParams{
		Order: responses.InputItemListParamsOrderAsc, Limit: param.NewOpt[int64](2)})
	for it.Next() {
		var m map[string]any
		_ = json.Unmarshal([]byte(it.Current().RawJSON()), &m)
		texts = append(texts, messageText(m))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return texts
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
