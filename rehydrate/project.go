package rehydrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/wire"
)

// This file writes the vLLM-bound form of each item (the projection). Each writer emits a fixed,
// allowlisted set of members built from validated tokens; nothing else of the item crosses. Why each
// shape is what it is (docs/wire.md §6.4 and the Addendum; vLLM's ResponsesRequest.input is validated
// against openai-python's ResponseInputItemParam | ResponseOutputItem union, then read by
// responses/utils.py for chat-template models and responses/harmony.py for gpt-oss):
//
//   - message, user/system/developer: {"type":"message","role","content":[parts]} with parts
//     input_text{type,text} and input_image{type,image_url,detail} (string content becomes one
//     input_text part, as in the normalised form). This is the shape of
//     EasyInputMessageParam. output_text parts in these roles become input_text (an output_text part
//     would only validate inside an output message). detail is required by openai-python's
//     ResponseInputImageParam, so a missing one is sent as "auto" (OpenAI's default).
//   - message, assistant: {"type":"message","role":"assistant","content":"<all text>"}: the text of
//     every output_text (and refusal) part, concatenated without separator, as ONE string. vLLM's
//     chat-template path reads only content[0] of an assistant message, so several parts must be
//     merged; and a string is the only assistant form that validates without an id, a status and
//     per-part annotations (EasyInputMessageParam). Harmony reads the string the same way.
//   - reasoning: {"type":"reasoning","id","summary":[],"content":[{"type":"reasoning_text","text"}]}
//     with ALL plaintext parts joined by "\n" into one part: harmony joins parts with "\n" itself and
//     the chat-template path reads only content[0], so one joined part gives both paths the full
//     text. summary is always empty (Addendum: some vLLM versions read summary[0] first when it is
//     present). id is required by ResponseReasoningItemParam. encrypted_content and status never
//     cross.
//   - function_call: {"type":"function_call","call_id","name","arguments"}. A call of a tool
//     declared in a namespace tool ({"namespace":"ns","name":"n"}) is sent as name "ns__n": the
//     flat name its tool was sent under (tools.go), exactly as vLLM flattens it itself
//     (utils._construct_message_from_response_item, tool_parsers/utils.flat_namespace_tool_name).
//   - function_call_output: {"type":"function_call_output","call_id","output"}; an output array of
//     text parts only is sent as their concatenated string (harmony takes only a string), other
//     arrays as projected parts.
//
// No status crosses: vLLM continues (instead of answering) a final assistant or reasoning item whose
// status is in_progress or incomplete (utils.should_continue_final_message), and an absent status
// is never that. No id crosses except the reasoning id.

// itemStats are the counters of one projected item, committed only if the item is kept.
type itemStats struct {
	reasoning  bool
	rbytes     int
	encDropped bool
	opened     bool // respgate's encrypted_content was opened
	assistant  bool // an assistant message (reasoning.context current_turn drops the reasoning before it)
	skip       skipReason
}

type skipReason int

const (
	keep skipReason = iota
	skipEmptyMessage
	skipReasoningNoText
)

func partPath(field string, j int) string { return "." + field + "[" + strconv.Itoa(j) + "]" }

// partOf checks element j of an item's content or output array: an object with a string type.
func partOf(b []byte, p *part, w where, field string, j int) (string, error) {
	if !p.obj {
		return "", w.invalidType(partPath(field, j), "an object (a content part)")
	}
	if p.typ.Absent(b) {
		return "", w.missing(partPath(field, j) + ".type")
	}
	if !p.typ.IsStr(b) {
		return "", w.invalidType(partPath(field, j)+".type", "a string")
	}
	return word(b, p.typ), nil
}

// stringMember checks that sp is a string. The member is named field (j < 0), or field[j].sub; the
// name is only built for an error, since this runs for every part of every stored item.
func stringMember(b []byte, sp jsonscan.Span, w where, field string, j int, sub string) error {
	if sp.IsStr(b) {
		return nil
	}
	path := "." + field
	if j >= 0 {
		path = partPath(field, j) + "." + sub
	}
	if sp.Absent(b) {
		return w.missing(path)
	}
	return w.invalidType(path, "a string")
}

func unsupportedPart(w where, path, typ, allowed string) error {
	return wire.Invalid(w.param(path), CodeUnsupportedContent,
		"Content part type '%s' in %s is not supported: vLLM accepts %s here.", wire.Clip(typ), w.name(path), allowed)
}

// project appends the vLLM-bound form of an item (already classified) to bd.buf; it appends nothing
// for an item it skips.
func (bd *builder) project(v *view, w where, id string) (itemStats, error) {
	switch v.kind {
	case kindMessage:
		return bd.message(v, w)
	case kindReasoning:
		return bd.reasoning(v, w, id)
	case kindFunctionCall:
		return bd.functionCall(v, w)
	case kindFunctionCallOutput:
		return bd.functionCallOutput(v, w)
	}
	return itemStats{}, unsupportedItem(v, w)
}

func unsupportedItem(v *view, w where) error {
	t := "item_reference"
	if v.typ.IsStr(v.b) {
		t = str(v.b, v.typ)
	}
	accepted := upstreamSupportedItemList
	if w.hist || w.ref {
		accepted = storedSupportedItemList // an item_reference is resolved only in a request's input
	}
	return wire.Invalid(w.param(""), CodeUnsupportedItemType,
		"Item type '%s' in %s is not supported: vLLM accepts only %s items.", wire.Clip(t), w.name(""), accepted)
}

func (bd *builder) message(v *view, w where) (itemStats, error) {
	b := v.b
	role, err := checkRole(v, w)
	if err != nil {
		return itemStats{}, err
	}
	if err := checkContent(v, w); err != nil {
		return itemStats{}, err
	}
	start := len(bd.buf)
	if role == "assistant" {
		bd.buf = append(bd.buf, `{"type":"message","role":"assistant","content":"`...)
		text := len(bd.buf)
		if v.content.IsStr(b) {
			bd.buf = appendStrInner(bd.buf, b, v.content)
		} else {
			for j := range v.contentParts {
				p := &v.contentParts[j]
				typ, err := partOf(b, p, w, "content", j)
				if err != nil {
					return itemStats{}, err
				}
				var t jsonscan.Span
				var sub string
				switch typ {
				case "output_text", "input_text":
					t, sub = p.text, "text"
				case "refusal":
					t, sub = p.refusal, "refusal"
				default:
					return itemStats{}, unsupportedPart(w, partPath("content", j), typ,
						"output_text and refusal parts in assistant messages")
				}
				if err := stringMember(b, t, w, "content", j, sub); err != nil {
					return itemStats{}, err
				}
				bd.buf = appendStrInner(bd.buf, b, t)
			}
		}
		if len(bd.buf) == text {
			bd.buf = bd.buf[:start]
			return itemStats{skip: skipEmptyMessage}, nil
		}
		bd.buf = append(bd.buf, `"}`...)
		return itemStats{assistant: true}, nil
	}

	bd.buf = append(bd.buf, `{"type":"message","role":"`...)
	bd.buf = append(bd.buf, role...)
	bd.buf = append(bd.buf, `","content":`...)
	if v.content.IsStr(b) {
		if v.content.EmptyStr() {
			bd.buf = bd.buf[:start]
			return itemStats{skip: skipEmptyMessage}, nil
		}
		// The same shape as the normalised form, so a stored string and a replayed part compare
		// equal in dedupe.
		bd.buf = append(bd.buf, `[{"type":"input_text","text":`...)
		bd.buf = appendStr(bd.buf, b, v.content)
		bd.buf = append(bd.buf, "}]}"...)
		return itemStats{}, nil
	}
	bd.buf = append(bd.buf, '[')
	n, err := bd.inputParts(b, v.contentParts, w, "content",
		"input_text and input_image (image_url) parts in user, system and developer messages")
	if err != nil {
		return itemStats{}, err
	}
	if n == 0 {
		bd.buf = bd.buf[:start]
		return itemStats{skip: skipEmptyMessage}, nil
	}
	bd.buf = append(bd.buf, "]}"...)
	return itemStats{}, nil
}

// inputParts appends the projected input parts (input_text, output_text as input_text,
// input_image) and returns how many it wrote.
func (bd *builder) inputParts(b []byte, parts []part, w where, field, allowed string) (int, error) {
	n := 0
	for j := range parts {
		p := &parts[j]
		typ, err := partOf(b, p, w, field, j)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			bd.buf = append(bd.buf, ',')
		}
		switch typ {
		case "input_text", "output_text":
			if err := stringMember(b, p.text, w, field, j, "text"); err != nil {
				return 0, err
			}
			bd.buf = append(bd.buf, `{"type":"input_text","text":`...)
			bd.buf = appendStr(bd.buf, b, p.text)
			bd.buf = append(bd.buf, '}')
		case "input_image":
			if p.imageURL.Absent(b) {
				return 0, wire.Invalid(w.param(partPath(field, j)+".image_url"), CodeUnsupportedContent,
					"Missing %s: vLLM accepts images only by image_url (not file_id).", w.name(partPath(field, j)+".image_url"))
			}
			if err := stringMember(b, p.imageURL, w, field, j, "image_url"); err != nil {
				return 0, err
			}
			bd.buf = append(bd.buf, `{"type":"input_image","image_url":`...)
			bd.buf = appendStr(bd.buf, b, p.imageURL)
			bd.buf = append(bd.buf, `,"detail":`...)
			if p.detail.Absent(b) {
				bd.buf = append(bd.buf, `"auto"`...)
			} else {
				if err := stringMember(b, p.detail, w, field, j, "detail"); err != nil {
					return 0, err
				}
				bd.buf = appendStr(bd.buf, b, p.detail)
			}
			bd.buf = append(bd.buf, '}')
		default:
			return 0, unsupportedPart(w, partPath(field, j), typ, allowed)
		}
		n++
	}
	return n, nil
}

// hasPlaintext reports whether a reasoning item has at least one non-empty content text.
func hasPlaintext(v *view) bool {
	for j := range v.contentParts {
		p := &v.contentParts[j]
		if p.obj && p.text.IsStr(v.b) && !p.text.EmptyStr() {
			return true
		}
	}
	return false
}

func (bd *builder) reasoning(v *view, w where, id string) (itemStats, error) {
	b := v.b
	if !v.summary.Absent(b) && v.summary.Kind(b) != '[' {
		return itemStats{}, w.invalidType(".summary", "an array")
	}
	enc := false
	switch v.encrypted.Kind(b) {
	case 0, 'n':
	case '"':
		enc = !v.encrypted.EmptyStr()
	default:
		return itemStats{}, w.invalidType(".encrypted_content", "a string or null")
	}
	if k := v.content.Kind(b); k != 0 && k != 'n' && k != '[' {
		return itemStats{}, w.invalidType(".content", "an array of reasoning_text parts, or null")
	}
	sealed, err := bd.unseal(v, w, id)
	if err != nil {
		return itemStats{}, err
	}

	start := len(bd.buf)
	bd.buf = append(bd.buf, `{"type":"reasoning","id":`...)
	if v.id.IsStr(b) {
		bd.buf = appendStr(bd.buf, b, v.id)
	} else {
		// A stored item without an id: vLLM requires one, and no client sees this one.
		bd.buf = wire.AppendString(bd.buf, bd.newID(wire.PrefixReasoning))
	}
	bd.buf = append(bd.buf, `,"summary":[],"content":[{"type":"reasoning_text","text":"`...)
	text := len(bd.buf)
	if err := bd.reasoningText(b, v.contentParts, w); err != nil {
		return itemStats{}, err
	}
	if sealed != nil {
		if err := bd.sealedText(sealed, text, w); err != nil {
			return itemStats{}, err
		}
	}
	n := len(bd.buf) - text
	if n == 0 {
		bd.buf = bd.buf[:start]
		if enc && sealed == nil {
			return itemStats{}, encryptedOnly(w)
		}
		// Nothing readable: no content, or only a summary, which is never substituted for
		// content (docs/design.md §5). Harmony would skip such an item too.
		return itemStats{skip: skipReasoningNoText}, nil
	}
	bd.buf = append(bd.buf, `"}]}`...)
	return itemStats{reasoning: true, rbytes: n, encDropped: enc, opened: sealed != nil}, nil
}

// reasoningText appends the non-empty texts of a reasoning item's content parts (of b), joined
// by "\n", as the inside of one JSON string.
func (bd *builder) reasoningText(b []byte, parts []part, w where) error {
	text := len(bd.buf)
	for j := range parts {
		p := &parts[j]
		if !p.obj {
			return w.invalidType(partPath("content", j), "an object (a reasoning_text part)")
		}
		if err := stringMember(b, p.text, w, "content", j, "text"); err != nil {
			return err
		}
		if p.text.EmptyStr() {
			continue
		}
		if len(bd.buf) > text {
			bd.buf = append(bd.buf, `\n`...)
		}
		bd.buf = appendStrInner(bd.buf, b, p.text)
	}
	return nil
}

// ownBlob reports whether a reasoning item carries respgate's own encrypted_content (which Build
// opens, whatever respgate has stored under the item's id).
func ownBlob(v *view) bool {
	return v.encrypted.IsStr(v.b) && seal.IsSealed(str(v.b, v.encrypted))
}

// unseal opens the item's encrypted_content when it is respgate's own (nil, nil when it is not,
// or no ring is configured): the content parts it sealed, as a JSON array. A blob of respgate's
// that does not open for this tenant, item and type is a 400 naming the item and the reason.
func (bd *builder) unseal(v *view, w where, id string) ([]byte, error) {
	b := v.b
	if bd.keys == nil || !v.encrypted.IsStr(b) || v.encrypted.EmptyStr() {
		return nil, nil
	}
	blob := str(b, v.encrypted)
	if !seal.IsSealed(blob) {
		return nil, nil
	}
	if !v.id.IsStr(b) || id == "" {
		return nil, sealedError(w, "has no id, and respgate's encrypted_content opens only with the id of the item it was issued for")
	}
	plain, err := bd.keys.Open(seal.Binding{Tenant: bd.tenant, ItemID: id, ItemType: wire.TypeReasoning}, blob)
	switch {
	case err == nil:
		return plain, nil
	case errors.Is(err, seal.ErrOtherTenant):
		return nil, sealedError(w, "was issued to another API key; it opens only for the key it was issued to")
	case errors.Is(err, seal.ErrTampered):
		return nil, sealedError(w, "was modified, or was issued for another item (its id or type differs)")
	case errors.Is(err, seal.ErrRetiredKey):
		return nil, sealedError(w, "was sealed under key '%s', which has been retired; the reasoning it held cannot be recovered: send the item's content, or leave the item out",
			sealKID(blob))
	case errors.Is(err, seal.ErrUnknownKey):
		return nil, sealedError(w, "was sealed under key '%s', which this gateway does not have", sealKID(blob))
	case errors.Is(err, seal.ErrTooLarge):
		return nil, sealedError(w, "is larger than any respgate issues")
	}
	return nil, sealedError(w, "is not well-formed")
}

// sealKID is the key id of a blob Open has parsed.
func sealKID(blob string) string {
	kid, _, _ := strings.Cut(strings.TrimPrefix(blob, seal.Prefix), ".")
	return kid
}

func sealedError(w where, reason string, args ...any) error {
	return wire.Invalid(w.param(""), CodeInvalidEncryptedContent, "The encrypted_content of %s %s.",
		w.name(""), fmt.Sprintf(reason, args...))
}

// sealedText writes the text respgate sealed (sealed, a JSON array of content parts) at the end
// of bd.buf, where the client's own text (if any) begins at text. The sealed text is the item's:
// client text beside it is dropped unread. It is never compared with the sealed text: with
// --reasoning-exposure hidden, an answer that depended on the comparison would let a client
// holding a blob confirm a guess of the text it hides (issue 38 item 4).
func (bd *builder) sealedText(sealed []byte, text int, w where) error {
	mark := len(bd.buf)
	parts, _, err := scanSealed(sealed)
	if err != nil {
		return sealedError(w, "is not well-formed")
	}
	if err := bd.reasoningText(sealed, parts, w); err != nil {
		return sealedError(w, "is not well-formed")
	}
	if mark > text { // the client's text: the sealed text takes its place
		n := copy(bd.buf[text:], bd.buf[mark:])
		bd.buf = bd.buf[:text+n]
	}
	return nil
}

// scanSealed reads the content parts of a sealed reasoning item.
func scanSealed(b []byte) ([]part, int, error) {
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, 0, jsonscan.ErrSyntax
	}
	e, _, parts, err := scanParts(b, i, nil)
	return parts, e, err
}

func encryptedOnly(w where) error {
	switch {
	case w.hist:
		return wire.Invalid(w.param(""), CodeEncryptedReasoning,
			"Stored reasoning item '%s' (from '%s') carries only encrypted_content, which respgate cannot read and vLLM cannot accept; this history cannot be replayed.",
			w.id, w.prefix)
	case w.id != "":
		return wire.Invalid(w.param(""), CodeEncryptedReasoning,
			"Reasoning item '%s' carries only encrypted_content, which respgate cannot read and vLLM cannot accept; send its plaintext content or omit the item.",
			w.id)
	}
	return wire.Invalid(w.param(""), CodeEncryptedReasoning,
		"Reasoning item %s carries only encrypted_content, which respgate cannot read and vLLM cannot accept; send its plaintext content or omit the item.",
		w.name(""))
}

func (bd *builder) functionCall(v *view, w where) (itemStats, error) {
	b := v.b
	if err := stringMember(b, v.callID, w, "call_id", -1, ""); err != nil {
		return itemStats{}, err
	}
	if err := stringMember(b, v.name, w, "name", -1, ""); err != nil {
		return itemStats{}, err
	}
	if v.arguments.Absent(b) {
		return itemStats{}, w.missing(".arguments")
	}
	if !v.arguments.IsStr(b) {
		return itemStats{}, w.invalidType(".arguments", "a string (the JSON-encoded arguments)")
	}
	bd.buf = append(bd.buf, `{"type":"function_call","call_id":`...)
	bd.buf = appendStr(bd.buf, b, v.callID)
	bd.buf = append(bd.buf, `,"name":`...)
	switch k := v.namespace.Kind(b); {
	case k == 0 || k == 'n' || k == '"' && v.namespace.EmptyStr():
		bd.buf = appendStr(bd.buf, b, v.name)
	case k == '"':
		bd.buf = append(bd.buf, '"')
		bd.buf = appendStrInner(bd.buf, b, v.namespace)
		bd.buf = append(bd.buf, NamespaceSeparator...)
		bd.buf = appendStrInner(bd.buf, b, v.name)
		bd.buf = append(bd.buf, '"')
	default:
		return itemStats{}, w.invalidType(".namespace", "a string")
	}
	bd.buf = append(bd.buf, `,"arguments":`...)
	bd.buf = appendStr(bd.buf, b, v.arguments)
	bd.buf = append(bd.buf, '}')
	if v.callID.F == 0 && bd.knownCall(v.callID.Inner(b)) {
		return itemStats{}, nil
	}
	bd.calls[str(b, v.callID)] = struct{}{}
	return itemStats{}, nil
}

func (bd *builder) functionCallOutput(v *view, w where) (itemStats, error) {
	b := v.b
	if err := stringMember(b, v.callID, w, "call_id", -1, ""); err != nil {
		return itemStats{}, err
	}
	var known bool
	if v.callID.F == 0 {
		known = bd.knownCall(v.callID.Inner(b))
	} else {
		known = bd.knownCall([]byte(str(b, v.callID)))
	}
	if !known {
		return itemStats{}, wire.Invalid(w.param(""), CodeOutputWithoutCall,
			"The function_call_output %s has call_id '%s', but no function_call with that call_id comes before it; send the function_call item first (or continue the response that made it).",
			w.name(""), wire.Clip(str(b, v.callID)))
	}
	if v.output.Absent(b) {
		return itemStats{}, w.missing(".output")
	}
	k := v.output.Kind(b)
	if k != '"' && k != '[' {
		return itemStats{}, w.invalidType(".output", "a string or an array of content parts")
	}
	bd.buf = append(bd.buf, `{"type":"function_call_output","call_id":`...)
	bd.buf = appendStr(bd.buf, b, v.callID)
	bd.buf = append(bd.buf, `,"output":`...)
	if k == '"' {
		bd.buf = appendStr(bd.buf, b, v.output)
		bd.buf = append(bd.buf, '}')
		return itemStats{}, nil
	}
	// Text-only arrays become one string (harmony renders a tool message from a string only).
	allText := true
	for j := range v.outputParts {
		p := &v.outputParts[j]
		typ, err := partOf(b, p, w, "output", j)
		if err != nil {
			return itemStats{}, err
		}
		if typ != "input_text" && typ != "output_text" {
			allText = false
			break
		}
		if err := stringMember(b, p.text, w, "output", j, "text"); err != nil {
			return itemStats{}, err
		}
	}
	if allText {
		bd.buf = append(bd.buf, '"')
		for j := range v.outputParts {
			bd.buf = appendStrInner(bd.buf, b, v.outputParts[j].text)
		}
		bd.buf = append(bd.buf, `"}`...)
		return itemStats{}, nil
	}
	bd.buf = append(bd.buf, '[')
	if _, err := bd.inputParts(b, v.outputParts, w, "output",
		"input_text and input_image (image_url) parts in function_call_output"); err != nil {
		return itemStats{}, err
	}
	bd.buf = append(bd.buf, "]}"...)
	return itemStats{}, nil
}

// OpenSealed checks a reasoning item that carries respgate's own encrypted_content (sealed for
// tenant) and returns it with the content the blob holds in place of its own, so that what is
// stored keeps the plaintext whatever happens to the key later. Items without such a blob are
// returned unchanged (opened false); content the item carried beside the blob is replaced unread.
// Errors are Build's: 400 invalid_encrypted_content, with param as the item's name (e.g.
// "items[2]").
func OpenSealed(it wire.Item, keys *seal.Ring, tenant, param string) (out wire.Item, opened bool, err error) {
	v, _, err := scanItem(it.JSON, nil)
	w := where{prefix: param, idx: -1}
	if err != nil || classify(&v, w) != nil || v.kind != kindReasoning || keys == nil || !ownBlob(&v) {
		return it, false, nil
	}
	id, err := idOf(&it, &v, w)
	if err != nil {
		return it, false, err
	}
	bd := &builder{keys: keys, tenant: tenant, newID: wire.NewID}
	if _, err := bd.reasoning(&v, w, id); err != nil {
		return it, false, err
	}
	sealed, err := bd.unseal(&v, w, id)
	if err != nil {
		return it, false, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(it.JSON, &m); err != nil {
		return it, false, w.invalidJSON()
	}
	m["content"] = sealed
	if it.JSON, err = json.Marshal(m); err != nil {
		return it, false, fmt.Errorf("rehydrate: rewrite opened item: %w", err)
	}
	return it, true, nil
}
