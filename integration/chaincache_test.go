package integration

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
)

// countingStore counts the chain loads and generation checks a gateway makes.
type countingStore struct {
	store.Store
	chainLoads, genChecks atomic.Int64
}

func (c *countingStore) ResponseChainGet(ctx context.Context, p *store.ResponseChainGetParams) (*store.Chain, error) {
	c.chainLoads.Add(1)
	return c.Store.ResponseChainGet(ctx, p)
}

func (c *countingStore) ChainGeneration(ctx context.Context, p *store.ChainGenerationParams) (int64, error) {
	c.genChecks.Add(1)
	return c.Store.ChainGeneration(ctx, p)
}

// TestAReplicaNeverContinuesFromACachedChainPastADeletionOnAnother runs two gateways (replicas)
// on one Postgres database: replica B continues a chain from its cache (no chain load, one
// generation check per turn); replica A deletes an ancestor; B's next continuation must load
// the chain again and answer previous_response_not_found naming it, never the cached history.
func TestAReplicaNeverContinuesFromACachedChainPastADeletionOnAnother(t *testing.T) {
	dsn := pgtest.DSN(t)
	open := func() store.Store {
		st, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatalf("open postgres: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	a := newGateway(t, open())
	counted := &countingStore{Store: open()}
	b := newGateway(t, counted)

	r0 := b.create(t, `{"model":"`+harmony+`","input":"one"}`)
	r1 := b.create(t, `{"model":"`+harmony+`","input":"two","previous_response_id":"`+r0.ID+`"}`)
	prev := r1.ID
	for _, in := range []string{"three", "four", "five"} {
		prev = b.create(t, `{"model":"`+harmony+`","input":"`+in+`","previous_response_id":"`+prev+`"}`).ID
	}
	// Only the first continuation loaded a chain; the next three were cache hits.
	if loads, checks := counted.chainLoads.Load(), counted.genChecks.Load(); loads != 1 || checks != 3 {
		t.Fatalf("replica B: %d chain loads and %d generation checks for 4 continuations, want 1 and 3", loads, checks)
	}
	// Replica B continues the head from its cache; replica A, which has no cache of it, loads
	// the chain: both send the model the same history.
	body := `{"model":"` + harmony + `","input":"six","previous_response_id":"` + prev + `"}`
	b.create(t, body)
	a.create(t, body)
	if counted.chainLoads.Load() != 1 {
		t.Fatalf("the continuation of a cached head loaded its chain")
	}
	last := func(g *gw) []map[string]any {
		reqs := g.UpstreamRequests()
		return upstreamInput(t, reqs[len(reqs)-1])
	}
	if fromCache, loaded := last(b), last(a); !reflect.DeepEqual(fromCache, loaded) || len(loaded) < 10 {
		t.Fatalf("history from the cache differs from the loaded one:\n%v\n%v", fromCache, loaded)
	}

	status, resp, _ := rawDo(t, "DELETE", a.URL+"/responses/"+r1.ID, "", "Authorization", "Bearer test-key")
	if status != 200 {
		t.Fatalf("delete on replica A: %d %s", status, resp)
	}
	status, resp, _ = rawDo(t, "POST", b.URL+"/responses", `{"model":"`+harmony+`","input":"seven","previous_response_id":"`+prev+`"}`, "Authorization", "Bearer test-key")
	_, code, param, msg := envelope(t, resp)
	if status != 400 || code != "previous_response_not_found" || param != "previous_response_id" || !strings.Contains(msg, r1.ID) {
		t.Fatalf("replica B continuing past an ancestor replica A deleted: %d %s", status, resp)
	}
	if counted.chainLoads.Load() != 2 {
		t.Fatalf("replica B answered without loading the chain again (%d loads)", counted.chainLoads.Load())
	}
}
