package engine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/fleet"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// recordingCaller is the simulator behind upstream.Single, answering as replica "replica-N" for
// the Nth call, away (upstream.Served.Away) when N is even, and recording every route it was
// given.
type recordingCaller struct {
	upstream.Caller
	mu     sync.Mutex
	routes []upstream.Route
}

func (r *recordingCaller) served(rt upstream.Route) upstream.Served {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes = append(r.routes, rt)
	n := len(r.routes)
	return upstream.Served{Replica: "replica-" + string(rune('0'+n)), Away: n%2 == 0}
}

func (r *recordingCaller) Create(ctx context.Context, rt upstream.Route, body []byte) ([]byte, upstream.Served, error) {
	raw, _, err := r.Caller.Create(ctx, rt, body)
	return raw, r.served(rt), err
}

func (r *recordingCaller) StreamLent(ctx context.Context, rt upstream.Route, body []byte, release func()) (*upstream.Stream, upstream.Served, error) {
	s, _, err := r.Caller.StreamLent(ctx, rt, body, release)
	return s, r.served(rt), err
}

// Every turn of a chain, streamed or not, and every fork of it, goes upstream with one routing
// key, which its first turn had too; a continuation prefers the replica that served the turn it
// continues, which is stored on the response; the client's prompt_cache_key is the key when it
// sends one.
func TestTheTurnsOfAChainShareTheirKeyAndPreferTheLastReplica(t *testing.T) {
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	t.Cleanup(sim.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	uc, err := upstream.New(upstream.Config{BaseURL: sim.URL + "/v1", Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	rc := &recordingCaller{Caller: upstream.Single(uc)}
	st := newSQLite(t)
	e := newTestEngine(t, Config{}, st, rc)
	create := func(body string) string {
		t.Helper()
		code, out := call(t, e, body)
		if code != http.StatusOK {
			t.Fatalf("turn: %d %s", code, out)
		}
		id := out[strings.Index(out, `"id":"resp_`)+6:]
		return id[:strings.Index(id, `"`)]
	}
	first := create(`{"model":"openai/gpt-oss-sim","input":"one","instructions":"be brief"}`)
	second := create(`{"model":"openai/gpt-oss-sim","input":"two","instructions":"be brief","previous_response_id":"` + first + `"}`)
	create(`{"model":"openai/gpt-oss-sim","input":"three","instructions":"be brief","stream":true,"previous_response_id":"` + second + `"}`)
	create(`{"model":"openai/gpt-oss-sim","input":"fork","instructions":"be brief","previous_response_id":"` + first + `"}`)
	create(`{"model":"openai/gpt-oss-sim","input":"one","instructions":"be brief","prompt_cache_key":"user-42"}`)
	other := create(`{"model":"openai/gpt-oss-sim","input":"another chain","instructions":"be brief"}`)

	rc.mu.Lock()
	routes := append([]upstream.Route(nil), rc.routes...)
	rc.mu.Unlock()
	if len(routes) != 6 {
		t.Fatalf("%d upstream calls, want 6", len(routes))
	}
	// Each continuation carries where the turn it continues ran, replica and away, from the
	// store or the chain cache: the fleet sends a chain that is away from its first choice back.
	for i, want := range []upstream.Served{{}, {Replica: "replica-1"}, {Replica: "replica-2", Away: true}, {Replica: "replica-1"}} {
		if routes[i].Key != routes[0].Key || routes[i].Model != "openai/gpt-oss-sim" || routes[i].Prefer != want.Replica || routes[i].Away != want.Away {
			t.Errorf("turn %d of the chain: route %+v, want key %q, prefer %q and away %v", i+1, routes[i], routes[0].Key, want.Replica, want.Away)
		}
	}
	if want := fleet.Key(fleet.KeyParams{Tenant: testTenant, PromptCacheKey: "user-42"}); routes[4].Key != want {
		t.Errorf("a turn with prompt_cache_key: key %q", routes[4].Key)
	}
	if routes[5].Key == routes[0].Key || routes[5].Key == "" {
		t.Errorf("another chain's key %q equals the first chain's", routes[5].Key)
	}
	r, _, err := st.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: testTenant, ID: other})
	if err != nil || r.Replica != "replica-6" || !r.ReplicaAway {
		t.Fatalf("the stored replica of the last turn: %v %+v", err, r)
	}
}

// Two first turns with the same opening, sent apart (by two clients, to two respgate replicas, or
// by a client that resends its whole history every turn), get the same key: the opening is its
// content, not the item id respgate gives each turn's input, so every respgate replica routes it
// to the replica whose cache holds that prefix (issue 39: the two replicas choose the same vLLM
// replica). Kills: an opening key that hashes the first item with its generated id.
func TestTheSameOpeningSentTwiceHasOneKey(t *testing.T) {
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	t.Cleanup(sim.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	uc, err := upstream.New(upstream.Config{BaseURL: sim.URL + "/v1", Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	rc := &recordingCaller{Caller: upstream.Single(uc)}
	e := newTestEngine(t, Config{}, newSQLite(t), rc)
	for _, body := range []string{
		`{"model":"openai/gpt-oss-sim","input":"same opening","instructions":"be brief"}`,
		`{"model":"openai/gpt-oss-sim","input":"same opening","instructions":"be brief","stream":true}`,
		`{"model":"openai/gpt-oss-sim","input":[{"type":"message","role":"user","content":"same opening"}],"instructions":"be brief","store":false}`,
		`{"model":"openai/gpt-oss-sim","input":"another opening","instructions":"be brief"}`,
	} {
		if code, out := call(t, e, body); code != http.StatusOK {
			t.Fatalf("turn: %d %s", code, out)
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.routes) != 4 {
		t.Fatalf("%d upstream calls, want 4", len(rc.routes))
	}
	k := rc.routes[0].Key
	if k == "" || rc.routes[1].Key != k || rc.routes[2].Key != k {
		t.Errorf("keys %q, %q, %q: want one key for one opening", k, rc.routes[1].Key, rc.routes[2].Key)
	}
	if rc.routes[3].Key == k {
		t.Error("another opening has the same key")
	}
}
