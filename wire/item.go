package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
)

// Item is one Responses item (message, reasoning, function_call, function_call_output, or any type
// respgate does not know) kept as its complete JSON object. JSON is authoritative: unknown fields,
// null versus absent, encrypted_content and status all survive because nothing re-encodes it.
// ID and Type are copies of the object's "id" and "type" members, for indexing only.
//
// The zero value is not a valid item. Items are immutable once built: code that needs a changed
// item builds a new JSON object instead of editing JSON in place.
type Item struct {
	ID   string
	Type string
	JSON json.RawMessage
}

// ParseItem checks that raw is a JSON object and returns it as an Item. The bytes are copied, so
// the caller may reuse raw. An object without "type" keeps Type empty (easy-form messages and
// item_reference may omit it); callers decide whether that is acceptable.
func ParseItem(raw []byte) (Item, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return Item{}, errors.New("wire: item is not a JSON object")
	}
	var head struct {
		ID   *string `json:"id"`
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return Item{}, fmt.Errorf("wire: decode item: %w", err)
	}
	it := Item{JSON: append(json.RawMessage(nil), raw...)}
	if head.ID != nil {
		it.ID = *head.ID
	}
	if head.Type != nil {
		it.Type = *head.Type
	}
	return it, nil
}

// MarshalJSON writes the item's JSON unchanged.
func (it Item) MarshalJSON() ([]byte, error) {
	if len(it.JSON) == 0 {
		return []byte("null"), nil
	}
	return it.JSON, nil
}

// UnmarshalJSON parses an item with ParseItem.
func (it *Item) UnmarshalJSON(b []byte) error {
	p, err := ParseItem(b)
	if err != nil {
		return err
	}
	*it = p
	return nil
}

// Fields decodes the item's top-level members without decoding their values.
func (it Item) Fields() (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(it.JSON, &m); err != nil {
		return nil, fmt.Errorf("wire: decode item fields: %w", err)
	}
	return m, nil
}

// String prints a safe summary (type, id, size), never the content: items hold prompts, reasoning
// and tool arguments, which must not reach logs (docs/design.md §1 invariant 6).
func (it Item) String() string {
	return fmt.Sprintf("item{type=%s id=%s bytes=%d}", it.Type, it.ID, len(it.JSON))
}

// GoString is String, so %#v cannot leak content either.
func (it Item) GoString() string { return it.String() }

// LogValue is String, so slog's handlers (JSON included) cannot leak content either.
func (it Item) LogValue() slog.Value { return slog.StringValue(it.String()) }

// Item types respgate knows by name.
const (
	TypeMessage            = "message"
	TypeReasoning          = "reasoning"
	TypeFunctionCall       = "function_call"
	TypeFunctionCallOutput = "function_call_output"
	TypeItemReference      = "item_reference"
)

// AppendHiddenReasoning appends the form of a reasoning item a client sees when reasoning is
// hidden (--reasoning-exposure hidden, docs/reasoning.md): id, type, status, an empty summary, no
// content, and the encrypted_content that carries it. The streamed output_item.done and every
// read route write it with this one function, so they agree byte for byte.
func AppendHiddenReasoning(dst []byte, id, status, encrypted string) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendString(dst, id)
	dst = append(dst, `,"type":"reasoning","status":`...)
	dst = AppendString(dst, status)
	dst = append(dst, `,"summary":[],"encrypted_content":`...)
	dst = AppendString(dst, encrypted)
	return append(dst, '}')
}
