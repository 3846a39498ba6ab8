package rehydrate

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// ParseInput turns the request's "input" (a JSON string, or an array of items) into items as the
// client sent them: easy-form messages ({role, content}) and item references stay as they are, and
// nothing is validated beyond each element being an object (Build validates the rest, with the
// element's index in its errors). A string becomes one user message {"type":"message","role":"user",
// "content":"…"}. An absent or null input returns no items and no error: whether input may be
// missing depends on the history, which Build knows.
//
// Errors are *wire.APIError 400 with param "input" or "input[i]".
func ParseInput(raw json.RawMessage) ([]wire.Item, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		e, f, err := jsonscan.ScanString(raw, 0)
		if err != nil || e != len(raw) {
			return nil, wire.Invalid("input", CodeInvalidJSON, "Invalid JSON in 'input'.")
		}
		b := make([]byte, 0, len(raw)+40)
		b = append(b, `{"type":"message","role":"user","content":`...)
		b = appendStr(b, raw, jsonscan.Span{S: 0, E: e, F: f})
		b = append(b, '}')
		return []wire.Item{{Type: wire.TypeMessage, JSON: b}}, nil
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, wire.Invalid("input", CodeInvalidJSON, "Invalid JSON in 'input'.")
		}
		items := make([]wire.Item, len(elems))
		for i, e := range elems {
			it, err := wire.ParseItem(e)
			if err != nil && len(e) > 0 && e[0] == '{' {
				// An object whose "id" or "type" is not a string: keep it, so Build can name the
				// member that is wrong.
				it, err = wire.Item{JSON: append(json.RawMessage(nil), e...)}, nil
			}
			if err != nil {
				w := where{prefix: "input", idx: i}
				return nil, wire.Invalid(w.param(""), CodeInvalidType,
					"Invalid type for %s: expected an object (an input item).", w.name(""))
			}
			if !wire.ValidID(it.ID) {
				// An id is looked up, logged and named in errors: control characters (BEL,
				// U+2028…) are refused as docs/errors.md says, before anything is stored.
				w := where{prefix: "input", idx: i}
				return nil, wire.Invalid(w.param(".id"), CodeInvalidValue,
					"Invalid value for %s: an id must be valid UTF-8 without control characters.", w.name(".id"))
			}
			items[i] = it
		}
		return items, nil
	}
	return nil, wire.Invalid("input", CodeInvalidType,
		"Invalid type for 'input': expected a string or an array of input items.")
}

// ReferencedIDs lists, once each and in order, the ids the caller must load from the tenant's
// store and hand to Build through Params.Lookup:
//   - the ids of item_reference items ({"type":"item_reference","id"} or a bare {"id"});
//   - the ids of reasoning items that arrive without plaintext content (only encrypted_content
//     that is not respgate's own, or only a summary, as some SDKs replay them). If respgate stored that reasoning item, Build
//     replays the plaintext it stored instead of rejecting the item (or replaying nothing).
//
// Items that do not parse are skipped here; Build reports them.
func ReferencedIDs(input []wire.Item) []string {
	var ids []string
	for i := range input {
		v, _, err := scanItem(input[i].JSON, nil)
		if err != nil || classify(&v, where{prefix: "input", idx: i}) != nil || !v.id.IsStr(v.b) {
			continue
		}
		if v.kind != kindReference && (v.kind != kindReasoning || hasPlaintext(&v) || ownBlob(&v)) {
			continue
		}
		id := str(v.b, v.id)
		if id == "" || slices.Contains(ids, id) {
			continue
		}
		ids = append(ids, id)
	}
	return ids
}

// Lookup resolves item ids (from item_reference items, and reasoning items without plaintext) to
// stored items of the request's tenant. Implementations must only return the tenant's own items.
type Lookup interface {
	LookupItem(id string) (wire.Item, bool)
}

// MapLookup is a Lookup over a map the caller filled beforehand (with the items of ReferencedIDs
// it found); ids it lacks are unknown.
type MapLookup map[string]wire.Item

// LookupItem returns the item stored under id.
func (m MapLookup) LookupItem(id string) (wire.Item, bool) {
	it, ok := m[id]
	return it, ok
}

// Normalize returns the storable form of one client item, as NormalizeAt does with errors naming
// the item "input". Build uses it for response input items; use NormalizeAt for items of another
// request member (conversation items) so errors carry their index.
func Normalize(it wire.Item, newID func(prefix string) string) (wire.Item, error) {
	return normalize(it, newID, where{prefix: "input", idx: -1})
}

// NormalizeAt returns the storable form of one client item; param names the item in errors (for
// example "items[2]"). The result:
//   - easy-form messages ({role, content:"text"}, or a message without "type") become
//     {"type":"message", "id", "role", "content":[{"type":"input_text","text"}], "status":"completed"}
//     (assistant text becomes {"type":"output_text","text","annotations":[]});
//   - an id is minted with newID(wire.PrefixForType(type)) when the item has none (or null, or "");
//   - messages without a status get "status":"completed";
//   - every other member is kept verbatim, in order (lossless: encrypted_content, unknown SDK
//     fields, unknown item types all survive).
//
// An item that needs no change is returned as is (sharing its bytes, which are immutable). Only
// what normalising needs is validated (messages: role and content; every item: a string id); Build
// validates the rest. An item_reference is not an item and cannot be normalised (400
// item_reference_not_storable): resolve it first. newID nil means wire.NewID.
func NormalizeAt(it wire.Item, newID func(prefix string) string, param string) (wire.Item, error) {
	return normalize(it, newID, where{prefix: param, idx: -1})
}

func normalize(it wire.Item, newID func(string) string, w where) (wire.Item, error) {
	if newID == nil {
		newID = wire.NewID
	}
	v, _, err := scanItem(it.JSON, nil)
	if err != nil {
		return wire.Item{}, w.invalidJSON()
	}
	if err := classify(&v, w); err != nil {
		return wire.Item{}, err
	}
	return normalizeView(it, &v, newID, w)
}

func normalizeView(it wire.Item, v *view, newID func(string) string, w where) (wire.Item, error) {
	id, err := idOf(&it, v, w)
	if err != nil {
		return wire.Item{}, err
	}
	p, err := planNormalize(v, w)
	if err != nil {
		return wire.Item{}, err
	}
	if id != "" && !p.easy && !p.addStatus && !v.typ.Absent(v.b) {
		it.ID, it.Type = id, p.typ
		return it, nil
	}
	p.id = id
	if id == "" {
		p.mint = true
		p.id = newID(wire.PrefixForType(p.typ))
	}
	return wire.Item{ID: p.id, Type: p.typ, JSON: p.write(v)}, nil
}

// normPlan is what normalizeView decided about one item before rewriting it.
type normPlan struct {
	typ, role string
	id        string // the item's id, minted when mint
	mint      bool   // the item had no usable id: drop its id member and write id first
	easy      bool   // an easy-form message: no type, or string content
	addStatus bool   // a message without status: drop a null status and append "completed"
}

// planNormalize validates what normalising needs of the classified item v and decides its type and
// how it must be rewritten.
func planNormalize(v *view, w where) (normPlan, error) {
	b := v.b
	var p normPlan
	switch v.kind {
	case kindReference:
		return p, wire.Invalid(w.param(""), CodeReferenceNotStorable,
			"%s is an item_reference; only the item it references can be stored.", upperFirst(w.name("")))
	case kindMessage:
		p.typ = wire.TypeMessage
		var err error
		if p.role, err = checkRole(v, w); err != nil {
			return p, err
		}
		if err := checkContent(v, w); err != nil {
			return p, err
		}
		p.easy = !v.typ.Present() || v.content.IsStr(b)
		p.addStatus = v.status.Absent(b)
	default:
		p.typ = str(b, v.typ)
	}
	return p, nil
}

// write returns v's storable JSON: type and minted id first, every other member verbatim and in
// order, string content as one text part, and the added status last.
func (p *normPlan) write(v *view) []byte {
	b := v.b
	ow := objWriter{out: make([]byte, 0, len(b)+len(p.id)+96)}
	ow.out = append(ow.out, '{')
	if v.typ.Absent(b) {
		ow.sep()
		ow.out = append(ow.out, `"type":"message"`...)
	}
	if p.mint {
		ow.sep()
		ow.out = append(ow.out, `"id":`...)
		ow.out = wire.AppendString(ow.out, p.id)
	}
	o := jsonscan.NewObj(b, 0, 0)
	for {
		m, ok := o.Next()
		if !ok {
			break
		}
		switch {
		case keyIs(b, m, "id") && p.mint, keyIs(b, m, "type") && v.typ.Absent(b), keyIs(b, m, "status") && p.addStatus:
			continue // replaced (or a null we re-add)
		case keyIs(b, m, "content") && m.Val.S == v.content.S && v.content.IsStr(b):
			ow.sep()
			ow.out = appendTextContent(ow.out, b, v.content, p.role)
			continue
		}
		ow.sep()
		ow.out = append(ow.out, b[m.Key.S:m.Val.E]...) // key, colon, value: verbatim
	}
	if p.addStatus {
		ow.sep()
		ow.out = append(ow.out, `"status":"completed"`...)
	}
	return append(ow.out, '}')
}

// objWriter appends the members of one JSON object, with a comma before all but the first.
type objWriter struct {
	out []byte
	n   int // members written
}

func (ow *objWriter) sep() {
	if ow.n > 0 {
		ow.out = append(ow.out, ',')
	}
	ow.n++
}

// appendTextContent appends the "content" member for a string content (at sp in b) as one text part:
// output_text with empty annotations for the assistant, input_text otherwise.
func appendTextContent(out, b []byte, sp jsonscan.Span, role string) []byte {
	part := `[{"type":"input_text","text":`
	if role == "assistant" {
		part = `[{"type":"output_text","text":`
	}
	out = append(out, `"content":`...)
	out = append(out, part...)
	out = appendStr(out, b, sp)
	if role == "assistant" {
		out = append(out, `,"annotations":[]`...)
	}
	return append(out, "}]"...)
}

func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
