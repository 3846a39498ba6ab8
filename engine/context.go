package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/wire"
)

// Context management (docs/compaction.md): the model's context window, truncation:"auto", and
// automatic compaction before a turn whose input nears the window.

// ParseContextWindows reads the --context-window setting: comma-separated "pattern=tokens" pairs
// (path.Match patterns; a bare number applies to every model). Models no pattern matches use the
// max_model_len vLLM's /v1/models reports.
func ParseContextWindows(spec string) ([]byModel[int], error) {
	return parseByModel("context window", spec, func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, errors.New("the value must be a positive number of tokens")
		}
		return n, nil
	})
}

// contextWindow is the model's context window in tokens: the configured one, else vLLM's
// max_model_len from /v1/models (asked once per model and remembered); 0 when unknown.
func (e *Engine) contextWindow(ctx context.Context, model string) int {
	if n, ok := lookupByModel(e.windows, model); ok {
		return n
	}
	if v, ok := e.modelWindows.Load(model); ok {
		return v.(int)
	}
	raw, err := e.upstream.Models(ctx)
	if err != nil {
		return 0
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if json.Unmarshal(raw, &list) != nil {
		return 0
	}
	n := 0
	for _, m := range list.Data {
		if m.MaxModelLen > 0 {
			e.modelWindows.Store(m.ID, m.MaxModelLen)
		}
		if m.ID == model {
			n = m.MaxModelLen
		}
	}
	return n
}

// inputBudget is how many tokens of input a turn may send in a window: the window less the
// output the request reserves (max_output_tokens, else an eighth of the window).
func inputBudget(window int, req *wire.CreateRequest) int {
	reserve := window / 8
	if req.MaxOutputTokens.Set() && int(req.MaxOutputTokens.Value) < window {
		reserve = int(req.MaxOutputTokens.Value)
	}
	return window - reserve
}

// manageContext runs before rehydration on the expanded history and input: automatic compaction
// when the session crosses the compaction threshold (the summary replaces the region in what vLLM
// receives, and the compaction item leads the turn's output), then
// truncation:"auto" (whole turns dropped from the middle until the estimate fits). The
// compaction trigger sizes the turn as vLLM counts it (sessionSize: the previous response's
// usage, /tokenize); truncation, which must size each turn it may drop, uses
// compact.EstimateTokens, a deliberate over-estimate.
func (e *Engine) manageContext(ctx context.Context, tn string, req *Spec, ex *expanded, responseID string) error {
	auto := req.Request.Truncation.Value == "auto"
	if e.cfg.CompactionThreshold <= 0 && req.CompactThreshold == 0 && !auto {
		return nil
	}
	if len(ex.history) == 0 {
		return nil
	}
	size := func() int { return compact.EstimateTokens(ex.history) + compact.EstimateTokens(ex.input) }
	window := 0
	if req.CompactThreshold == 0 || auto {
		window = e.contextWindow(ctx, req.Model)
	}
	if req.CompactThreshold > 0 || (window > 0 && e.cfg.CompactionThreshold > 0) {
		// The trigger is what vLLM counts, not a guess (tokens.go).
		z := e.sessionSize(ctx, req.Model, ex)
		crossed := req.CompactThreshold > 0 && z.tokens >= req.CompactThreshold ||
			req.CompactThreshold == 0 && compact.Threshold(z.tokens, window, e.cfg.CompactionThreshold)
		e.log.Debug("turn size", "tokens", z.tokens, "history_from", z.history, "input_from", z.input, "compact", crossed)
		if crossed {
			if err := e.autoCompact(ctx, tn, req, ex, responseID); err != nil {
				return err
			}
		}
	}
	if window <= 0 {
		return nil
	}
	if auto {
		budget := inputBudget(window, req.Request)
		if size() > budget {
			all := append(append([]wire.Item(nil), ex.history...), ex.input...)
			kept, dropped := compact.Truncate(all, budget, compact.EstimateTokens)
			if dropped > 0 && len(kept) >= len(ex.input) {
				ex.history = kept[:len(kept)-len(ex.input)]
				ex.truncated = dropped
			}
		}
	}
	return nil
}

// autoCompact compacts the history of a turn (compactItems' plan, on the history and input as
// vLLM would receive them): the region goes to the model for a summary; vLLM then receives the
// lead, the summary message and the recent turns; the compaction item leads the turn's output
// (OpenAI's shape: streamed first, stored as the first output item), so that continuing the
// chain replays the summary instead of the region.
func (e *Engine) autoCompact(ctx context.Context, tn string, req *Spec, ex *expanded, responseID string) error {
	all := append(append([]wire.Item(nil), ex.history...), ex.input...)
	keep := max(e.cfg.CompactionKeepTurns, 1)
	plan := compact.PlanItems(all, keep)
	if plan.Empty() || len(plan.Recent) < len(ex.input) {
		return nil
	}
	summary, _, err := e.summarise(ctx, tn, req, plan.Region)
	if err != nil {
		return err
	}
	id := wire.NewID(compact.PrefixCompaction)
	payload := compact.Payload{V: 1, Summary: summary, Replaced: compact.ItemIDs(plan.Region), Model: req.Model}
	blob, err := e.ring.Seal(seal.Binding{Tenant: tn, ItemID: id, ItemType: compact.TypeCompaction}, payload.Marshal())
	if err != nil {
		return &wire.APIError{Status: 502, Type: wire.ErrServer, Code: "compaction_failed",
			Message: "The summary is larger than a compaction item can hold; nothing was compacted."}
	}
	if req.Store {
		e.archiveCompaction(ctx, tn, id, responseID, req.Model, plan.Region)
	}
	recentHistory := plan.Recent[:len(plan.Recent)-len(ex.input)]
	h := make([]wire.Item, 0, len(plan.Lead)+1+len(recentHistory))
	ex.history = append(append(append(h, plan.Lead...), compact.SummaryMessage(id, summary)), recentHistory...)
	ex.output = append(ex.output, compact.NewItem(id, blob))
	e.log.Info("compacted before a turn", "compaction_id", id, "replaced_items", len(plan.Region), "summary_bytes", len(summary))
	return nil
}
