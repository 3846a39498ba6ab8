package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// This file holds respgate's reasoning policies (docs/reasoning.md): the seal ring that mints and
// opens respgate's own encrypted_content, the exposure policy (what clients see of reasoning) and
// the default context policy (which reasoning is replayed to the model).

// ReasoningExposure is what clients see of reasoning items.
type ReasoningExposure string

const (
	// ExposureRaw shows reasoning as the model produced it (reasoning_text events, content).
	ExposureRaw ReasoningExposure = "raw"
	// ExposureHidden never shows reasoning text: no reasoning events, items with an empty
	// summary, no content, and always respgate's encrypted_content, on every route. Stored items
	// keep the plaintext and are replayed to the model as before.
	ExposureHidden ReasoningExposure = "hidden"
)

// sealKeyID is the key id of the key generated and kept in the store.
const sealKeyID = "auto"

// loadRing builds the seal ring: the configured keys (the first seals), then the generated key
// the store keeps (created on first start; every replica reads the same), which seals when no key
// is configured and otherwise still opens what it sealed, unless the operator retired or replaced
// the "auto" id.
func loadRing(ctx context.Context, st store.Store, cfg *Config) (*seal.Ring, error) {
	generated, err := st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{
		Name: store.SecretSealKey, Generate: seal.NewKeySecret})
	if err != nil {
		return nil, fmt.Errorf("load seal key: %w", err)
	}
	keys := append([]seal.Key(nil), cfg.SealKeys...)
	taken := false
	for _, k := range keys {
		taken = taken || k.ID == sealKeyID
	}
	for _, id := range cfg.SealRetired {
		taken = taken || id == sealKeyID
	}
	if !taken {
		keys = append(keys, seal.Key{ID: sealKeyID, Secret: generated})
	}
	ring, err := seal.NewRing(keys, cfg.SealRetired, 0)
	if err != nil {
		return nil, fmt.Errorf("seal keys: %w", err)
	}
	return ring, nil
}

// ParseReasoningContext reads the --reasoning-context setting: a value (all_turns or
// current_turn) for every model, or comma-separated "pattern=value" pairs whose first pattern
// matching the model (path.Match: "openai/gpt-oss-*") decides; models no pattern matches get
// all_turns.
func ParseReasoningContext(spec string) ([]byModel[string], error) {
	return parseByModel("reasoning context", spec, func(v string) (string, error) {
		if v != wire.ContextAllTurns && v != wire.ContextCurrentTurn {
			return "", fmt.Errorf("the value must be %s or %s", wire.ContextAllTurns, wire.ContextCurrentTurn)
		}
		return v, nil
	})
}

// reasoningContext is the reasoning.context a request gets: its own, else the default for its
// model.
func (e *Engine) reasoningContext(r *wire.CreateRequest) string {
	if r.Reasoning != nil && r.Reasoning.Context != nil {
		return *r.Reasoning.Context
	}
	if v, ok := lookupByModel(e.contexts, r.Model.Value); ok {
		return v
	}
	return wire.ContextAllTurns
}

// ItemView is how reasoning items are shown to one client: hidden (--reasoning-exposure hidden),
// or with respgate's encrypted_content added (include reasoning.encrypted_content), sealed for
// tenant. The zero value shows items as stored.
type ItemView struct {
	ring   *seal.Ring
	tenant string
	hide   bool
	mint   bool
}

// View is the item view of a request from tenant; include says whether it asked for
// reasoning.encrypted_content.
func (e *Engine) View(tenant string, include bool) ItemView {
	hide := e.cfg.ReasoningExposure == ExposureHidden
	return ItemView{ring: e.ring, tenant: tenant, hide: hide, mint: hide || include}
}

// sealer is the accumulator's Seal for a turn (nil when the view mints nothing).
func (v ItemView) sealer() func(id string, content []byte) string {
	if !v.mint {
		return nil
	}
	return func(id string, content []byte) string { return v.seal(id, content) }
}

// seal mints the encrypted_content of reasoning item id from its content parts (a JSON array). It
// returns "" for content over the ring's bound, which the accumulator's own item limit keeps from
// happening.
func (v ItemView) seal(id string, content []byte) string {
	if len(content) == 0 {
		content = wire.EmptyArray
	}
	blob, err := v.ring.Seal(seal.Binding{Tenant: v.tenant, ItemID: id, ItemType: wire.TypeReasoning}, content)
	if err != nil {
		return ""
	}
	return blob
}

// items returns items as the view shows them (items itself when nothing changes).
func (v ItemView) Items(items []wire.Item) []wire.Item {
	if !v.mint {
		return items
	}
	var out []wire.Item
	for i, it := range items {
		if it.Type != wire.TypeReasoning {
			continue
		}
		shown, ok := v.item(it)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]wire.Item(nil), items...)
		}
		out[i] = shown
	}
	if out == nil {
		return items
	}
	return out
}

// item is one stored reasoning item as the view shows it; ok is false when it is shown as stored.
// An item that already carries respgate's encrypted_content (minted when the turn ran) keeps it,
// so a read shows the same blob the stream did.
func (v ItemView) item(it wire.Item) (wire.Item, bool) {
	f, err := it.Fields()
	if err != nil {
		return it, false
	}
	var enc, status string
	_ = wire.UnmarshalOpt(f["encrypted_content"], &enc)
	_ = wire.UnmarshalOpt(f["status"], &status)
	if !seal.IsSealed(enc) {
		enc = v.seal(it.ID, f["content"])
	} else if !v.hide {
		return it, false
	}
	if v.hide {
		if status == "" {
			status = string(wire.StatusCompleted)
		}
		it.JSON = wire.AppendHiddenReasoning(nil, it.ID, status, enc)
		return it, true
	}
	f["encrypted_content"], _ = json.Marshal(enc)
	b, err := json.Marshal(f)
	if err != nil {
		return it, false
	}
	it.JSON = b
	return it, true
}
