// Package orcheck checks what respgate sends clients against the published Open Responses
// specification: every response object against its ResponseResource schema, every streamed event
// against its streaming-event union, and the SSE framing and event order its text requires. It
// reads the specification's own OpenAPI document (a copy is kept in integration/testdata, with its
// source and date) and interprets the subset of JSON Schema that document uses, so the checks
// follow the published text, not a paraphrase of it.
//
// It is test support for respgate's end-to-end tests (integration) and the real-clients runner
// (integration/clients); nothing else imports it.
//
// Where the OpenAPI document and the schema the Open Responses compliance suite validates with
// (its generated zod schemas, docs/wire.md §7.1) differ, the stricter rule applies, and where respgate
// follows the OpenAI SDKs on purpose the deviation is explicit here, in Overlays, one line each.
package orcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Overlays are the deliberate differences between the OpenAPI document and what is checked.
// Each names its reason.
var Overlays = []string{
	// The compliance suite's zod schema (src/generated/kubb/zod) requires logprobs on output_text
	// parts; the OpenAPI document lists it as optional. The stricter form is checked.
	"OutputTextContent.required += logprobs",
	// The specification's text: every item MUST have id, type and status (its Items section); the
	// OpenAPI document's ReasoningBody lists status neither as required nor as a property.
	"ReasoningBody.required += status (in_progress, completed or incomplete)",
	// respgate streams reasoning text as response.reasoning_text.delta/.done, the names the
	// OpenAI SDKs require (their helpers throw on any other event type) and that the compliance
	// suite's zod union uses; the 2026-04-24 OpenAPI document names them response.reasoning.delta
	// /.done. They are checked against those schemas with the OpenAI type name (docs/wire.md §7.1).
	"ResponseReasoningDelta/DoneStreamingEvent.type also accepts response.reasoning_text.delta/.done",
	// JsonSchemaResponseFormat.schema is generated as anyOf:[{type:null}] (a generator artifact:
	// the field holds the JSON schema the client sent); any object or null is accepted.
	"JsonSchemaResponseFormat.schema: any object or null",
	// Codex CLI sends OpenAI namespace tools; the response echoes them (OpenAI's Tool union has
	// them, Open Responses' has only function tools). Accepted in "tools" as
	// {type:"namespace", name, tools:[FunctionTool…]}.
	"Tool also accepts an OpenAI namespace tool whose tools are FunctionTools",
}

// Schema is a loaded OpenAPI document. Safe for concurrent use once loaded.
type Schema struct {
	defs map[string]map[string]any
}

// Load reads the OpenAPI document at path.
func Load(path string) (*Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("orcheck: %w", err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("orcheck: decode %s: %w", path, err)
	}
	s := &Schema{defs: doc.Components.Schemas}
	for _, name := range []string{"ResponseResource", "OutputTextContent", "ReasoningBody", "MessageStatus", "ResponseReasoningDeltaStreamingEvent", "ResponseReasoningDoneStreamingEvent", "ItemField", "Tool"} {
		if s.defs[name] == nil {
			return nil, fmt.Errorf("orcheck: %s has no schema %s", path, name)
		}
	}
	s.applyOverlays()
	return s, nil
}

func (s *Schema) applyOverlays() {
	otc := s.defs["OutputTextContent"]
	otc["required"] = append(otc["required"].([]any), "logprobs")

	rb := s.defs["ReasoningBody"]
	rb["required"] = append(rb["required"].([]any), "status")
	rb["properties"].(map[string]any)["status"] = map[string]any{"$ref": "#/components/schemas/MessageStatus"}

	for _, ev := range []string{"ResponseReasoningDeltaStreamingEvent", "ResponseReasoningDoneStreamingEvent"} {
		typ := s.defs[ev]["properties"].(map[string]any)["type"].(map[string]any)
		name := typ["enum"].([]any)[0].(string)
		typ["enum"] = append(typ["enum"].([]any), strings.Replace(name, "response.reasoning.", "response.reasoning_text.", 1))
	}

	if js, ok := s.defs["JsonSchemaResponseFormat"]; ok {
		js["properties"].(map[string]any)["schema"] = map[string]any{"anyOf": []any{
			map[string]any{"type": "object"}, map[string]any{"type": "null"}}}
	}

	s.defs["OpenAINamespaceTool"] = map[string]any{
		"type":     "object",
		"required": []any{"type", "name", "tools"},
		"properties": map[string]any{
			"type":  map[string]any{"type": "string", "enum": []any{"namespace"}},
			"name":  map[string]any{"type": "string"},
			"tools": map[string]any{"type": "array", "items": map[string]any{"$ref": "#/components/schemas/FunctionTool"}},
		},
	}
	tool := s.defs["Tool"]
	tool["oneOf"] = append(tool["oneOf"].([]any), map[string]any{"$ref": "#/components/schemas/OpenAINamespaceTool"})
}

// Violation is one place where a value does not conform.
type Violation struct {
	Path    string // JSON pointer-like path, e.g. response.output[0].content[0].logprobs
	Message string
}

func (v Violation) String() string { return v.Path + ": " + v.Message }

// Error lists every violation found in one value.
type Error struct {
	What       string // "response", or the event type
	Violations []Violation
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "orcheck: %s does not conform to Open Responses:", e.What)
	for i, v := range e.Violations {
		if i == 8 {
			fmt.Fprintf(&b, "\n  … %d more", len(e.Violations)-i)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	return b.String()
}

func decode(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

// Response checks a response object (POST /responses, GET /responses/{id}, and the response of
// lifecycle events) against ResponseResource.
func (s *Schema) Response(raw []byte) error {
	return s.Validate("ResponseResource", "response", raw)
}

// Item checks one output item against ItemField.
func (s *Schema) Item(raw []byte) error {
	return s.Validate("ItemField", "item", raw)
}

// Validate checks raw against the named component schema; what names it in the error.
func (s *Schema) Validate(component, what string, raw []byte) error {
	v, err := decode(raw)
	if err != nil {
		return &Error{What: what, Violations: []Violation{{Path: what, Message: "not JSON: " + err.Error()}}}
	}
	var out []Violation
	s.check(map[string]any{"$ref": "#/components/schemas/" + component}, v, what, &out)
	if len(out) > 0 {
		return &Error{What: what, Violations: out}
	}
	return nil
}

// eventSchemas maps each streamed event type to its schema (the text/event-stream union of POST
// /responses), plus the OpenAI reasoning_text names (Overlays).
var eventSchemas = map[string]string{
	"response.created":                       "ResponseCreatedStreamingEvent",
	"response.queued":                        "ResponseQueuedStreamingEvent",
	"response.in_progress":                   "ResponseInProgressStreamingEvent",
	"response.completed":                     "ResponseCompletedStreamingEvent",
	"response.failed":                        "ResponseFailedStreamingEvent",
	"response.incomplete":                    "ResponseIncompleteStreamingEvent",
	"response.output_item.added":             "ResponseOutputItemAddedStreamingEvent",
	"response.output_item.done":              "ResponseOutputItemDoneStreamingEvent",
	"response.reasoning_summary_part.added":  "ResponseReasoningSummaryPartAddedStreamingEvent",
	"response.reasoning_summary_part.done":   "ResponseReasoningSummaryPartDoneStreamingEvent",
	"response.content_part.added":            "ResponseContentPartAddedStreamingEvent",
	"response.content_part.done":             "ResponseContentPartDoneStreamingEvent",
	"response.output_text.delta":             "ResponseOutputTextDeltaStreamingEvent",
	"response.output_text.done":              "ResponseOutputTextDoneStreamingEvent",
	"response.refusal.delta":                 "ResponseRefusalDeltaStreamingEvent",
	"response.refusal.done":                  "ResponseRefusalDoneStreamingEvent",
	"response.reasoning.delta":               "ResponseReasoningDeltaStreamingEvent",
	"response.reasoning.done":                "ResponseReasoningDoneStreamingEvent",
	"response.reasoning_text.delta":          "ResponseReasoningDeltaStreamingEvent",
	"response.reasoning_text.done":           "ResponseReasoningDoneStreamingEvent",
	"response.reasoning_summary_text.delta":  "ResponseReasoningSummaryDeltaStreamingEvent",
	"response.reasoning_summary_text.done":   "ResponseReasoningSummaryDoneStreamingEvent",
	"response.output_text.annotation.added":  "ResponseOutputTextAnnotationAddedStreamingEvent",
	"response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaStreamingEvent",
	"response.function_call_arguments.done":  "ResponseFunctionCallArgumentsDoneStreamingEvent",
	"error":                                  "ErrorStreamingEvent",
}

// Event checks one streamed event's JSON against the event union, chosen by its type. A type
// outside the union is a violation (the compliance suite's strict union rejects it, and the
// OpenAI TS helper throws on it).
func (s *Schema) Event(raw []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return &Error{What: "event", Violations: []Violation{{Path: "event", Message: "not a JSON object: " + err.Error()}}}
	}
	name, ok := eventSchemas[head.Type]
	if !ok {
		return &Error{What: "event", Violations: []Violation{{Path: "event.type", Message: fmt.Sprintf("%q is not an Open Responses streaming event", head.Type)}}}
	}
	return s.Validate(name, head.Type, raw)
}

func (s *Schema) resolve(ref string) map[string]any {
	const prefix = "#/components/schemas/"
	if !strings.HasPrefix(ref, prefix) {
		return nil
	}
	return s.defs[strings.TrimPrefix(ref, prefix)]
}

// check validates v against schema sch at path, appending violations to out.
func (s *Schema) check(sch map[string]any, v any, path string, out *[]Violation) {
	bad := func(format string, args ...any) {
		*out = append(*out, Violation{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if ref, ok := sch["$ref"].(string); ok {
		target := s.resolve(ref)
		if target == nil {
			bad("unresolvable $ref %s", ref)
			return
		}
		s.check(target, v, path, out)
	}
	if all, ok := sch["allOf"].([]any); ok {
		for _, sub := range all {
			s.check(sub.(map[string]any), v, path, out)
		}
	}
	if anyOf, ok := sch["anyOf"].([]any); ok {
		var best []Violation
		matched := false
		for _, sub := range anyOf {
			var o []Violation
			s.check(sub.(map[string]any), v, path, &o)
			if len(o) == 0 {
				matched = true
				break
			}
			if best == nil || len(o) < len(best) {
				best = o
			}
		}
		if !matched {
			if isNull(v) {
				bad("null is not allowed here")
			} else {
				*out = append(*out, best...)
			}
		}
	}
	if oneOf, ok := sch["oneOf"].([]any); ok {
		s.checkOneOf(sch, oneOf, v, path, out)
	}
	if t, ok := sch["type"]; ok {
		if !typeMatches(t, v) {
			bad("expected %v, got %s", t, describe(v))
			return
		}
	}
	if enum, ok := sch["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if equalJSON(e, v) {
				found = true
				break
			}
		}
		if !found {
			bad("%s is not one of %v", describe(v), enum)
		}
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if m, ok := num(sch["minLength"]); ok && float64(n) < m {
			bad("shorter than %v", m)
		}
		if m, ok := num(sch["maxLength"]); ok && float64(n) > m {
			bad("longer than %v", m)
		}
		if p, ok := sch["pattern"].(string); ok {
			if re, err := regexp.Compile(p); err == nil && !re.MatchString(x) {
				bad("does not match %s", p)
			}
		}
	case json.Number:
		f, _ := x.Float64()
		if m, ok := num(sch["minimum"]); ok && f < m {
			bad("below minimum %v", m)
		}
		if m, ok := num(sch["maximum"]); ok && f > m {
			bad("above maximum %v", m)
		}
	case []any:
		if m, ok := num(sch["minItems"]); ok && float64(len(x)) < m {
			bad("fewer than %v items", m)
		}
		if m, ok := num(sch["maxItems"]); ok && float64(len(x)) > m {
			bad("more than %v items", m)
		}
		if items, ok := sch["items"].(map[string]any); ok {
			for i, e := range x {
				s.check(items, e, path+"["+strconv.Itoa(i)+"]", out)
			}
		}
	case map[string]any:
		if m, ok := num(sch["maxProperties"]); ok && float64(len(x)) > m {
			bad("more than %v members", m)
		}
		props, _ := sch["properties"].(map[string]any)
		if req, ok := sch["required"].([]any); ok {
			for _, r := range req {
				if _, present := x[r.(string)]; !present {
					*out = append(*out, Violation{Path: path + "." + r.(string), Message: "required member missing"})
				}
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := props[k].(map[string]any); ok {
				s.check(p, x[k], path+"."+k, out)
				continue
			}
			switch ap := sch["additionalProperties"].(type) {
			case bool:
				if !ap {
					*out = append(*out, Violation{Path: path + "." + k, Message: "member not allowed"})
				}
			case map[string]any:
				s.check(ap, x[k], path+"."+k, out)
			}
		}
	}
}

// checkOneOf: with a discriminator, the branch whose discriminating property's enum holds the
// value must match; without one, exactly one branch must match.
func (s *Schema) checkOneOf(sch map[string]any, oneOf []any, v any, path string, out *[]Violation) {
	if disc, ok := sch["discriminator"].(map[string]any); ok {
		prop, _ := disc["propertyName"].(string)
		obj, isObj := v.(map[string]any)
		if !isObj {
			*out = append(*out, Violation{Path: path, Message: "expected an object, got " + describe(v)})
			return
		}
		val, _ := obj[prop].(string)
		var known []string
		for _, sub := range oneOf {
			branch := sub.(map[string]any)
			target := branch
			if ref, ok := branch["$ref"].(string); ok {
				target = s.resolve(ref)
			}
			for _, e := range discValues(target, prop) {
				known = append(known, e)
				if e == val {
					s.check(branch, v, path, out)
					return
				}
			}
		}
		*out = append(*out, Violation{Path: path + "." + prop, Message: fmt.Sprintf("%q is not one of %v", val, known)})
		return
	}
	matches := 0
	var best []Violation
	for _, sub := range oneOf {
		var o []Violation
		s.check(sub.(map[string]any), v, path, &o)
		if len(o) == 0 {
			matches++
		} else if best == nil || len(o) < len(best) {
			best = o
		}
	}
	switch {
	case matches == 0:
		*out = append(*out, best...)
	case matches > 1:
		*out = append(*out, Violation{Path: path, Message: fmt.Sprintf("matches %d oneOf branches", matches)})
	}
}

func discValues(target map[string]any, prop string) []string {
	props, _ := target["properties"].(map[string]any)
	p, _ := props[prop].(map[string]any)
	enum, _ := p["enum"].([]any)
	var out []string
	for _, e := range enum {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func typeMatches(t any, v any) bool {
	switch tt := t.(type) {
	case string:
		return oneType(tt, v)
	case []any:
		for _, x := range tt {
			if s, ok := x.(string); ok && oneType(s, v) {
				return true
			}
		}
	}
	return false
}

func oneType(t string, v any) bool {
	switch t {
	case "null":
		return v == nil
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := strconv.ParseInt(n.String(), 10, 64)
		return err == nil
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	return false
}

func isNull(v any) bool { return v == nil }

func num(x any) (float64, bool) {
	n, ok := x.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return "number " + x.String()
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
