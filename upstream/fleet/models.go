package fleet

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/respgate/respgate/wire"
)

// modelEntry is one model of a replica's /v1/models: its id, its context length and the entry
// as the replica sent it.
type modelEntry struct {
	ID          string
	MaxModelLen int
	Raw         json.RawMessage
}

// refreshModels asks r for its models and keeps them; a failure keeps what r said before.
func (f *Fleet) refreshModels(ctx context.Context, r *replica) {
	ctx, cancel := context.WithTimeout(ctx, f.health.Timeout)
	defer cancel()
	raw, err := r.client.Models(ctx)
	if err != nil {
		return
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.Unmarshal(raw, &list) != nil {
		return
	}
	ms := make([]modelEntry, 0, len(list.Data))
	for _, d := range list.Data {
		var m struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		}
		if json.Unmarshal(d, &m) != nil || m.ID == "" {
			continue
		}
		ms = append(ms, modelEntry{ID: m.ID, MaxModelLen: m.MaxModelLen, Raw: d})
	}
	r.models.Store(&ms)
}

// Models is the fleet's GET /v1/models (upstream.Caller): the healthy replicas are asked again
// (at once, each bounded by the probe timeout), then every model a pool serves is listed once,
// in pool order then as its replicas list them, with max_model_len the smallest any replica
// serving it reports. A pool with a models: list lists the models its replicas report that
// match it, and each literal name no replica reported. With no model at all and no healthy
// replica it is 503 upstream_unavailable.
func (f *Fleet) Models(ctx context.Context) ([]byte, error) {
	g := f.gen.Load()
	var wg sync.WaitGroup
	anyHealthy := false
	for _, p := range g.pools {
		for _, r := range p.replicas {
			if r.healthy.Load() {
				anyHealthy = true
				wg.Go(func() { f.refreshModels(ctx, r) })
			}
		}
	}
	wg.Wait()
	type agg struct {
		raw json.RawMessage
		min int
	}
	byID := map[string]*agg{}
	var order []string
	add := func(m modelEntry) {
		a, ok := byID[m.ID]
		if !ok {
			a = &agg{raw: m.Raw}
			byID[m.ID] = a
			order = append(order, m.ID)
		}
		if m.MaxModelLen > 0 && (a.min == 0 || m.MaxModelLen < a.min) {
			a.min = m.MaxModelLen
		}
	}
	for _, p := range g.pools {
		for _, r := range p.replicas {
			ms := r.models.Load()
			if ms == nil {
				continue
			}
			for _, m := range *ms {
				if len(p.cfg.Models) == 0 || matches(p.cfg.Models, m.ID) {
					add(m)
				}
			}
		}
		for _, pat := range p.cfg.Models {
			if !strings.ContainsAny(pat, `*?[\`) && byID[pat] == nil {
				raw := append(wire.AppendString([]byte(`{"id":`), pat), `,"object":"model","owned_by":"vllm"}`...) // JSON, not Go, quoting
				add(modelEntry{ID: pat, Raw: raw})
			}
		}
	}
	if len(order) == 0 && !anyHealthy {
		return nil, f.unavailable("")
	}
	b := []byte(`{"object":"list","data":[`)
	for i, id := range order {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, withMaxLen(byID[id].raw, byID[id].min)...)
	}
	return append(b, "]}"...), nil
}

// withMaxLen is a model entry with max_model_len set to n (unchanged when n is 0 or the entry
// is not an object).
func withMaxLen(raw json.RawMessage, n int) json.RawMessage {
	if n == 0 {
		return raw
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	m["max_model_len"] = json.RawMessage(strconv.Itoa(n))
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// ModelIDs are the ids Models would list now, from what the replicas said last (no request).
func (f *Fleet) ModelIDs() []string {
	var out []string
	for _, p := range f.gen.Load().pools {
		for _, r := range p.replicas {
			if ms := r.models.Load(); ms != nil {
				for _, m := range *ms {
					if (len(p.cfg.Models) == 0 || matches(p.cfg.Models, m.ID)) && !slices.Contains(out, m.ID) {
						out = append(out, m.ID)
					}
				}
			}
		}
	}
	return out
}
