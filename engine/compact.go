package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// This file serves compaction (docs/compaction.md): POST /v1/responses/compact, the opening and
// expansion of compaction items a request brings back, and the summarising side call to the
// model. The planning, the handoff prompt and the expansion itself are package compact's.

// Compacted is the answer of POST /v1/responses/compact.
type Compacted struct {
	ID     string      // the answer's id (keys nothing else; the archive record keeps it)
	Output []wire.Item // as the client sees them
	Usage  json.RawMessage
}

// Compact plans the session spec describes (its previous_response_id chain, then its input),
// asks the model for a handoff summary of it, and returns every user message, verbatim, then one
// sealed compaction item standing for the rest (OpenAI's compacted window), which the client
// sends back as the next request's input. Nothing is stored but the archive record of what the summary replaced.
func (e *Engine) Compact(ctx context.Context, spec *Spec) (*Compacted, error) {
	var out *Compacted
	err := e.Admitted(func() error {
		all, err := e.sessionItems(ctx, spec.Tenant, spec)
		if err != nil {
			return err
		}
		// The answer's id keys nothing else (a compact answer is not a stored response); the
		// archive record keeps it, so the id a client or its logs show leads an operator to it.
		id := wire.NewID(wire.PrefixResponse)
		items, usage, err := e.compactItems(ctx, spec.Tenant, spec, all, id)
		if err != nil {
			return err
		}
		out = &Compacted{ID: id, Output: e.View(spec.Tenant, false).Items(items), Usage: usage}
		return nil
	})
	return out, err
}

// sessionItems is every item of the session a request describes, in the form the store keeps:
// its history (chain or conversation), then its input, normalised, references resolved and
// checked as a turn would check them (an encrypted-only reasoning item is a 400 here too).
// Compaction items stay as they are.
func (e *Engine) sessionItems(ctx context.Context, tn string, req *Spec) ([]wire.Item, error) {
	src, err := e.loadSources(ctx, tn, req, nil)
	if err != nil {
		return nil, err
	}
	res, err := e.rehydrate(tn, req, src, nil)
	if err != nil {
		return nil, err
	}
	return append(append([]wire.Item(nil), src.history...), res.Input...), nil
}

// compactItems plans OpenAI's compaction window of items (compact.PlanWindow), asks the model
// for the summary and returns every user message then the compaction item, with the summary
// call's usage (OpenAI's shape; zeros for an empty session, which is returned as it is).
// responseID is the id of the compact answer, which the archive record keeps beside the
// compaction item's id.
func (e *Engine) compactItems(ctx context.Context, tn string, req *Spec, items []wire.Item, responseID string) ([]wire.Item, json.RawMessage, error) {
	w := compact.PlanWindow(items)
	if w.Empty() {
		return items, zeroUsage, nil
	}
	summary, usage, err := e.summarise(ctx, tn, req, w.Summarise)
	if err != nil {
		return nil, nil, err
	}
	id := wire.NewID(compact.PrefixCompaction)
	payload := compact.Payload{V: 1, Summary: summary, Replaced: compact.ItemIDs(w.Replaced), Model: req.Model}
	blob, err := e.ring.Seal(seal.Binding{Tenant: tn, ItemID: id, ItemType: compact.TypeCompaction}, payload.Marshal())
	if err != nil {
		return nil, nil, &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: "compaction_failed",
			Message: "The summary is larger than a compaction item can hold; nothing was compacted."}
	}
	e.archiveCompaction(ctx, tn, id, responseID, req.Model, w.Replaced)
	out := w.Output(compact.NewItem(id, blob))
	e.log.Info("compacted", "compaction_id", id, "replaced_items", len(w.Replaced), "kept_items", len(w.Users),
		"summary_bytes", len(summary))
	return out, usage, nil
}

var zeroUsage = json.RawMessage(`{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0}`)

// errEmptySummary: the model answered the handoff prompt with no text.
var errEmptySummary = &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: "compaction_failed",
	Message: "The model returned an empty summary; nothing was compacted."}

// summarise asks the request's model, without tools and not streamed, for the handoff summary of
// region (compaction items in it expanded to their summaries), and returns the text of its answer's
// messages (never its reasoning) and the call's usage.
func (e *Engine) summarise(ctx context.Context, tn string, req *Spec, region []wire.Item) (string, json.RawMessage, error) {
	ex, err := e.expandCompactions(tn, region, nil, "previous_response_id")
	if err != nil {
		return "", nil, err
	}
	members := map[string]json.RawMessage{"model": jsonString(req.Model), "store": json.RawMessage("false")}
	if req.Request.Instructions.Set() {
		members["instructions"] = jsonString(req.Request.Instructions.Value)
	}
	sreq, err := wire.DecodeCreateRequest(members)
	if err != nil {
		return "", nil, err
	}
	prompt := e.cfg.CompactionPrompt
	res, err := rehydrate.Build(&rehydrate.Params{History: ex.history, Input: []wire.Item{compact.HandoffMessage(prompt)},
		Request: sreq, NewID: wire.NewID, Keys: e.ring, Tenant: tn, ReasoningContext: e.reasoningContext(req.Request)})
	if err != nil {
		return "", nil, err
	}
	raw, _, err := e.createSync(ctx, "upstream.compact", upstream.Route{Model: req.Model}, res.Body)
	if err != nil {
		return "", nil, err
	}
	r, err := accumulator.FromResponse(accumulator.Options{ResponseID: wire.NewID(wire.PrefixResponse), NewID: wire.NewID}, raw)
	if err != nil || r.Status != wire.StatusCompleted {
		e.log.Warn("compaction summary not usable", "bytes", len(raw))
		return "", nil, errEmptySummary
	}
	var text strings.Builder
	for _, it := range r.Output {
		if it.Type == wire.TypeMessage {
			text.WriteString(messageText(it))
		}
	}
	if strings.TrimSpace(text.String()) == "" {
		return "", nil, errEmptySummary
	}
	usage := r.Usage
	if len(usage) == 0 {
		usage = zeroUsage
	}
	return strings.TrimSpace(text.String()), usage, nil
}

// messageText joins the output_text parts of a message item.
func messageText(it wire.Item) string {
	var m struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(it.JSON, &m)
	var b strings.Builder
	for _, p := range m.Content {
		if p.Type == "output_text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func jsonString(s string) json.RawMessage {
	return wire.AppendString(nil, s)
}

// expanded is a request's history and input with compaction items expanded for vLLM; restore
// turns Build's Result.Input back into what the client sent (the compaction items themselves).
type expanded struct {
	history, input []wire.Item
	originals      map[string]wire.Item
	// output leads the turn's output (the compaction item of automatic compaction: streamed
	// first, stored as the first output item, accumulator.Options.Prepend), and truncated counts
	// the items truncation:"auto" left out of what vLLM receives.
	output    []wire.Item
	truncated int
	// prevUsage is the previous response's usage (historyInfo.usage), and historyCut says that a
	// compaction item of the input left history items out, so that usage no longer sizes it.
	prevUsage  json.RawMessage
	historyCut bool
}

func (e *expanded) restore(items []wire.Item) []wire.Item {
	if len(e.originals) == 0 {
		return items
	}
	out := make([]wire.Item, len(items))
	for i, it := range items {
		if orig, ok := e.originals[it.ID]; ok {
			it = orig
		}
		out[i] = it
	}
	return out
}

// expandCompactions opens the compaction items of history and input (sealed for tenant tn) and
// replaces each with its summary message (compact.Expand); the items a compaction item of the
// input replaced are left out of the history too. An item that does not open is a 400
// invalid_encrypted_content naming it.
func (e *Engine) expandCompactions(tn string, history, input []wire.Item, histParam string) (*expanded, error) {
	ex := &expanded{history: history, input: input}
	has := false
	for _, it := range input {
		has = has || compact.IsCompaction(it)
	}
	for _, it := range history {
		has = has || compact.IsCompaction(it)
	}
	if !has {
		return ex, nil
	}
	open := func(id, enc string) (*compact.Payload, error) {
		if !seal.IsSealed(enc) {
			return nil, seal.ErrNotSealed
		}
		pt, err := e.ring.Open(seal.Binding{Tenant: tn, ItemID: id, ItemType: compact.TypeCompaction}, enc)
		if err != nil {
			return nil, err
		}
		return compact.ParsePayload(pt)
	}
	var err error
	var dropped map[string]bool
	ex.input, dropped, err = compact.Expand(input, open, nil)
	if err != nil {
		return nil, compactionError(err, "input")
	}
	ex.historyCut = len(dropped) > 0
	ex.history, _, err = compact.Expand(history, open, dropped)
	if err != nil {
		return nil, compactionError(err, histParam)
	}
	ex.originals = map[string]wire.Item{}
	for _, it := range input {
		if compact.IsCompaction(it) {
			ex.originals[it.ID] = it
		}
	}
	return ex, nil
}

// compactionError is the 400 of a compaction item that does not open.
func compactionError(err error, param string) error {
	var ie *compact.ItemError
	if !errors.As(err, &ie) {
		return err
	}
	subject := "a compaction item in the " + param // the history: "conversation" or "previous_response_id" chain
	if param == "previous_response_id" {
		subject += " chain"
	}
	if param == "input" {
		param = "input[" + strconv.Itoa(ie.Index) + "]"
		subject = "compaction item " + param
	}
	reason := "is not well-formed"
	switch {
	case errors.Is(err, seal.ErrNotSealed):
		reason = "was not issued by this gateway"
	case errors.Is(err, seal.ErrOtherTenant):
		reason = "was issued to another API key; it opens only for the key it was issued to"
	case errors.Is(err, seal.ErrTampered):
		reason = "was modified, or was issued for another item (its id or type differs)"
	case errors.Is(err, seal.ErrRetiredKey):
		reason = "was sealed under a key that has been retired"
	case errors.Is(err, seal.ErrUnknownKey):
		reason = "was sealed under a key this gateway does not have"
	}
	return wire.Invalid(param, rehydrate.CodeInvalidEncryptedContent, "The encrypted_content of %s %s.", subject, reason)
}

// archiveCompaction records what a summary replaced (ids and SHA-256 of their stored bytes), so
// an operator can audit it; the items themselves stay where they are stored. A failure is logged:
// the compaction itself does not depend on it.
func (e *Engine) archiveCompaction(ctx context.Context, tn, id, responseID, model string, region []wire.Item) {
	rec := store.Compaction{ID: id, Tenant: tn, ResponseID: responseID, Model: model, CreatedAt: time.Now()}
	for _, it := range region {
		rec.Replaced = append(rec.Replaced, store.CompactedItem{ItemID: it.ID, SHA256: compact.Digest(it)})
	}
	// Bounded as the commit is: a stalled store costs the turn CommitTimeout at most.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CommitTimeout)
	defer cancel()
	if err := e.store.CompactionInsert(actx, &store.CompactionInsertParams{Compaction: rec}); err != nil {
		e.log.Error("archive compaction", "compaction_id", id, "error", err)
	}
}

// CheckCompactionItem opens the compaction item it as a turn would (expandCompactions) and
// answers the same 400 invalid_encrypted_content, naming param, when it does not: a conversation
// door checks the items it adds (one that does not open would make every later turn of the
// conversation a 400 until it was deleted).
func (e *Engine) CheckCompactionItem(tn string, it wire.Item, param string) error {
	_, err := e.expandCompactions(tn, nil, []wire.Item{it}, "items")
	var ae *wire.APIError
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	out := *ae
	out.Message = strings.Replace(out.Message, "input[0]", param, 1)
	out.Param = param
	return &out
}
