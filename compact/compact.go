// Package compact owns respgate's compaction (docs/compaction.md): planning which items of a
// session a summary replaces — for automatic compaction, leading system/developer messages kept,
// the last keep_turns user turns kept verbatim, the boundary always on a user message so a function
// call is never separated from its output (PlanItems); for POST /v1/responses/compact, OpenAI's
// window of every user message verbatim then one compaction item for the rest (PlanWindow) — the
// handoff prompt the model is asked to answer with that summary, the sealed
// payload of a compaction item, its expansion into the one clearly marked summary message vLLM
// receives in its place, and the context-window arithmetic of truncation:"auto".
//
// It is pure: it never calls upstream (the turn code in server does), does no I/O and keeps no
// state. Sealing is the caller's: the payload is the plaintext server seals with the seal ring.
package compact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/respgate/respgate/wire"
)

const (
	// TypeCompaction is the item type of a compaction item.
	TypeCompaction = "compaction"
	// PrefixCompaction starts the id of every compaction item respgate mints.
	PrefixCompaction = "cmp_"
	// DefaultKeepTurns is how many of the most recent user turns stay verbatim.
	DefaultKeepTurns = 2
)

// DefaultHandoffPrompt is the instruction appended to the compacted region when the model is asked
// for the summary (overridable by the operator: --compaction-prompt / --compaction-prompt-file).
const DefaultHandoffPrompt = "Stop here. Write a summary for another model that will resume the work " +
	"from this point without seeing the conversation above. Keep every fact, name, number, decision, " +
	"constraint and open task the user gave or the work established; copy every fact the user asked " +
	"to be remembered verbatim, each on its own line. Say what was done and what remains. " +
	"Write only the summary."

// SummaryMarker opens the text of the message a compaction item expands into, so the model (and a
// reader of what vLLM received) can tell the summary from what the user said.
const SummaryMarker = "[respgate compaction summary: the earlier part of this conversation was replaced by this summary, written by a model that saw it]"

// Plan is a partition of a session's items (in order: Lead, Region, Recent is the whole).
type Plan struct {
	// Lead is the leading system and developer messages, kept as they are.
	Lead []wire.Item
	// Region is what a summary replaces; empty when there is nothing to compact.
	Region []wire.Item
	// Recent is the last keep_turns user turns (from a user message on), kept verbatim.
	Recent []wire.Item
}

// Empty reports whether the plan compacts nothing.
func (p *Plan) Empty() bool { return len(p.Region) == 0 }

// head is what planning reads of an item.
type head struct {
	Type string `json:"type"`
	Role string `json:"role"`
}

func headOf(it wire.Item) head {
	var h head
	_ = json.Unmarshal(it.JSON, &h)
	if h.Type == "" && h.Role != "" {
		h.Type = wire.TypeMessage
	}
	return h
}

// isUserMessage reports whether it is a message with role user: the only place a boundary falls.
func isUserMessage(it wire.Item) bool {
	h := headOf(it)
	return h.Type == wire.TypeMessage && h.Role == "user"
}

// PlanItems partitions items. keepTurns < 0 means DefaultKeepTurns. The boundary between Region
// and Recent is the keepTurns-th user message from the end (with keepTurns 0, the end), so every
// function_call stays with its output and every turn is whole. Fewer user messages than
// keepTurns, or nothing between Lead and that boundary, means nothing to compact (Region empty,
// Recent the rest). A Region made only of earlier compaction items is not compacted again.
func PlanItems(items []wire.Item, keepTurns int) Plan {
	if keepTurns < 0 {
		keepTurns = DefaultKeepTurns
	}
	lead := 0
	for lead < len(items) {
		h := headOf(items[lead])
		if h.Type != wire.TypeMessage || (h.Role != "system" && h.Role != "developer") {
			break
		}
		lead++
	}
	rest := items[lead:]
	boundary := len(rest)
	if keepTurns > 0 {
		seen := 0
		boundary = -1
		for i := len(rest) - 1; i >= 0; i-- {
			if isUserMessage(rest[i]) {
				seen++
				if seen == keepTurns {
					boundary = i
					break
				}
			}
		}
		if boundary < 0 {
			boundary = 0
		}
	}
	p := Plan{Lead: items[:lead:lead], Region: rest[:boundary:boundary], Recent: rest[boundary:]}
	onlyCompactions := true
	for _, it := range p.Region {
		onlyCompactions = onlyCompactions && headOf(it).Type == TypeCompaction
	}
	if onlyCompactions {
		p.Recent = rest
		p.Region = nil
	}
	return p
}

// Payload is the plaintext a compaction item's encrypted_content seals (JSON).
type Payload struct {
	// V is the payload format version (1).
	V int `json:"v"`
	// Summary is the model's handoff summary.
	Summary string `json:"summary"`
	// Replaced lists the ids of the items the summary replaces (the plan's Region), in order.
	Replaced []string `json:"replaced"`
	// Model is the model that wrote the summary.
	Model string `json:"model,omitempty"`
}

// Marshal is the payload's sealed bytes.
func (p *Payload) Marshal() []byte {
	b, _ := json.Marshal(p) // strings and ints only: cannot fail
	return b
}

// ErrBadPayload: an opened blob is not a compaction payload respgate wrote.
var ErrBadPayload = errors.New("compact: not a compaction payload")

// ParsePayload reads an opened compaction payload.
func ParsePayload(b []byte) (*Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil || p.V != 1 || strings.TrimSpace(p.Summary) == "" {
		return nil, ErrBadPayload
	}
	return &p, nil
}

// ItemIDs returns the ids of items, in order ("" for an item without one).
func ItemIDs(items []wire.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// NewItem is the compaction item a client sees and stores: {type, id, encrypted_content}.
func NewItem(id, encrypted string) wire.Item {
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Enc  string `json:"encrypted_content"`
	}{TypeCompaction, id, encrypted})
	return wire.Item{ID: id, Type: TypeCompaction, JSON: b}
}

// EncryptedContent returns a compaction item's encrypted_content ("" when absent or not a string).
func EncryptedContent(it wire.Item) string {
	var v struct {
		Enc string `json:"encrypted_content"`
	}
	_ = json.Unmarshal(it.JSON, &v)
	return v.Enc
}

// IsCompaction reports whether it is a compaction item.
func IsCompaction(it wire.Item) bool {
	if it.Type != "" {
		return it.Type == TypeCompaction
	}
	return headOf(it).Type == TypeCompaction
}

// SummaryMessage is the vLLM-bound message a compaction item id with summary expands into: one
// user message (every chat template accepts one anywhere) whose text opens with SummaryMarker.
// It keeps the compaction item's id, so the turn code can put the item itself back where it
// stores what the client sent.
func SummaryMessage(id, summary string) wire.Item {
	text := SummaryMarker + "\n\n" + strings.TrimSpace(summary)
	b, _ := json.Marshal(struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Role    string `json:"role"`
		Content []part `json:"content"`
		Status  string `json:"status"`
	}{wire.TypeMessage, id, "user", []part{{"input_text", text}}, "completed"})
	return wire.Item{ID: id, Type: wire.TypeMessage, JSON: b}
}

type part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// HandoffMessage is the user message that asks for the summary (prompt: the handoff prompt).
func HandoffMessage(prompt string) wire.Item {
	b, _ := json.Marshal(struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []part `json:"content"`
	}{wire.TypeMessage, "user", []part{{"input_text", prompt}}})
	return wire.Item{Type: wire.TypeMessage, JSON: b}
}

// Opener opens a compaction item's encrypted_content for the item's id; the server binds it to
// the tenant and the seal ring. Its errors are client faults (foreign or tampered blobs).
type Opener func(id, encrypted string) (*Payload, error)

// Expand returns items with every compaction item replaced by its summary message, and the items
// it replaced (by id) left out; the summary takes the place of the first replaced item present
// before the compaction item, else the compaction item's own place. drop lists more ids to leave
// out (those a compaction item of a later part of the request replaced). It returns items itself
// when there is no compaction item and nothing to drop. replaced is every id the compaction items
// of items replaced. An item that does not open is an *ItemError naming its index.
func Expand(items []wire.Item, open Opener, drop map[string]bool) (out []wire.Item, replaced map[string]bool, err error) {
	found := len(drop) > 0
	for _, it := range items {
		found = found || IsCompaction(it)
	}
	if !found {
		return items, nil, nil
	}
	type opened struct {
		idx int
		msg wire.Item
		p   *Payload
	}
	replaced = map[string]bool{}
	all := map[string]bool{}
	for id := range drop {
		all[id] = true
	}
	var ops []opened
	for i, it := range items {
		if !IsCompaction(it) {
			continue
		}
		p, err := open(it.ID, EncryptedContent(it))
		if err != nil {
			return nil, nil, &ItemError{Index: i, Err: err}
		}
		for _, id := range p.Replaced {
			if id != "" {
				replaced[id], all[id] = true, true
			}
		}
		ops = append(ops, opened{i, SummaryMessage(it.ID, p.Summary), p})
	}
	// Each summary goes where the first item it replaced was (if present). A compaction item
	// that a later one replaced contributes nothing: the later summary covers it.
	at := map[int]wire.Item{}
	for _, op := range ops {
		if all[items[op.idx].ID] {
			continue
		}
		pos := op.idx
		for i, it := range items {
			if i < pos && it.ID != "" && slices.Contains(op.p.Replaced, it.ID) {
				pos = i
				break
			}
		}
		// Two summaries for one place: keep both, in order. A pushed summary never passes its
		// own item's index: the summaries placed before it sit at or before their own items,
		// which come earlier, so every summary has a place among items.
		for _, taken := at[pos]; taken; _, taken = at[pos] {
			pos++
		}
		at[pos] = op.msg
	}
	out = make([]wire.Item, 0, len(items))
	for i, it := range items {
		if m, ok := at[i]; ok {
			out = append(out, m)
		}
		if IsCompaction(it) || (it.ID != "" && all[it.ID]) {
			continue
		}
		out = append(out, it)
	}
	return out, replaced, nil
}

// ItemError is a compaction item that did not open, at Index of the items given to Expand.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("compaction item %d: %v", e.Index, e.Err) }
func (e *ItemError) Unwrap() error { return e.Err }

// Digest is the SHA-256 (hex) of an item's canonical bytes: its JSON as stored, which respgate
// never re-encodes (wire.Item), so the archive can prove what a summary replaced.
func Digest(it wire.Item) string {
	sum := sha256.Sum256(it.JSON)
	return hex.EncodeToString(sum[:])
}

// Turns splits items (after the lead) into turns: each starts at a user message; items before the
// first user message form a turn of their own.
func Turns(items []wire.Item) [][]wire.Item {
	var out [][]wire.Item
	start := 0
	for i := 1; i <= len(items); i++ {
		if i == len(items) || isUserMessage(items[i]) {
			out = append(out, items[start:i:i])
			start = i
		}
	}
	if len(items) == 0 {
		return nil
	}
	return out
}

// Truncate is truncation:"auto": it drops whole turns from the middle (after the leading
// system/developer messages, oldest first: the recent turns go last) until size(the
// kept items) fits in budget. It returns the kept items and how many items it dropped. When even
// the lead plus the recent turns do not fit, it drops older recent turns too, keeping at least the
// last turn; the caller sends that and lets the server's error speak.
func Truncate(items []wire.Item, budget int, size func([]wire.Item) int) (kept []wire.Item, dropped int) {
	if size(items) <= budget {
		return items, 0
	}
	p := PlanItems(items, 0)
	turns := Turns(items[len(p.Lead):])
	for len(turns) > 1 {
		turns = turns[1:]
		kept = append(append([]wire.Item(nil), p.Lead...), flatten(turns)...)
		if size(kept) <= budget {
			break
		}
	}
	if kept == nil {
		return items, 0
	}
	return kept, len(items) - len(kept)
}

func flatten(turns [][]wire.Item) []wire.Item {
	var out []wire.Item
	for _, t := range turns {
		out = append(out, t...)
	}
	return out
}

// Threshold reports whether a turn of about used tokens crosses fraction of window (automatic
// compaction): false when window or fraction is not positive.
func Threshold(used, window int, fraction float64) bool {
	if window <= 0 || fraction <= 0 {
		return false
	}
	return float64(used) >= fraction*float64(window)
}

// EstimateTokens is a conservative token estimate of items when the server cannot ask vLLM's
// /tokenize: a token per 3 bytes of JSON (text averages about 4 bytes a token, JSON escapes
// and punctuation cost more).
func EstimateTokens(items []wire.Item) int {
	n := 0
	for _, it := range items {
		n += len(it.JSON)/3 + 4
	}
	return n
}
