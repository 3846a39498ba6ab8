// Package orcheck checks what respgate sends clients against the published Open Responses
// specification: every response object against its ResponseResource schema, every streamed event
// against its streaming-event union, and the SSE framing and event order its text requires. It
// validates with the specification's own OpenAPI document (a copy is kept in integration/testdata,
// with its source and date), compiled as JSON Schema 2020-12 (the dialect of OpenAPI 3.1) by
// santhosh-tekuri/jsonschema, so the checks follow the published text, not a paraphrase of it.
//
// It is test support for respgate's end-to-end tests (integration) and the real-clients runner
// (integration/clients); nothing else imports it.
//
// Where the checks deliberately differ from the OpenAPI document (stricter, as the Open Responses
// compliance suite's generated zod schemas are, or following the OpenAI SDKs on purpose), the
// difference is an edit of the document itself, listed with its reason in Overlays and applied
// before the document is compiled; the validator is never special-cased.
package orcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// An Overlay is one deliberate difference between the OpenAPI document and what is checked: an
// edit of the decoded document, applied before it is compiled. Apply fails when the place it
// edits is missing, so a newer document cannot drop an overlay in silence.
type Overlay struct {
	Reason string
	Apply  func(doc map[string]any) error
}

const schemas = "/components/schemas/"

// Overlays are applied in order by Load.
var Overlays = []Overlay{
	{
		Reason: "The compliance suite's zod schema (src/generated/kubb/zod) requires logprobs on output_text " +
			"parts; the OpenAPI document lists it as optional. The stricter form is checked (docs/wire.md §7.1).",
		Apply: func(doc map[string]any) error {
			return patchAdd(doc, schemas+"OutputTextContent/required/-", "logprobs")
		},
	},
	{
		Reason: "The specification's text: every item MUST have id, type and status (its Items section, docs/wire.md §7.1); " +
			"the OpenAPI document's ReasoningBody lists status neither as required nor as a property.",
		Apply: func(doc map[string]any) error {
			return errors.Join(
				patchAdd(doc, schemas+"ReasoningBody/required/-", "status"),
				patchAdd(doc, schemas+"ReasoningBody/properties/status", map[string]any{"$ref": "#" + schemas + "MessageStatus"}),
			)
		},
	},
	{
		Reason: "respgate streams reasoning text as response.reasoning_text.delta/.done, the names OpenAI's " +
			"API and vLLM use and the OpenAI SDKs require (their helpers throw on any other event type); the " +
			"2026-04-24 OpenAPI document, and the compliance suite's schemas generated from it, name them " +
			"response.reasoning.delta/.done. Both names are accepted by the same schemas (docs/wire.md §5.4, " +
			"§7.1; docs/compatibility.md \"Reasoning event names\").",
		Apply: func(doc map[string]any) error {
			return errors.Join(
				patchAdd(doc, schemas+"ResponseReasoningDeltaStreamingEvent/properties/type/enum/-", "response.reasoning_text.delta"),
				patchAdd(doc, schemas+"ResponseReasoningDoneStreamingEvent/properties/type/enum/-", "response.reasoning_text.done"),
			)
		},
	},
	{
		Reason: "JsonSchemaResponseFormat.schema is generated as anyOf:[{type:null}], a generator artifact: " +
			"the field holds the JSON schema the client sent. Any object or null is accepted.",
		Apply: func(doc map[string]any) error {
			return patchReplace(doc, schemas+"JsonSchemaResponseFormat/properties/schema",
				map[string]any{"anyOf": []any{map[string]any{"type": "object"}, map[string]any{"type": "null"}}})
		},
	},
	{
		Reason: "Codex CLI sends OpenAI namespace tools and the response echoes them (OpenAI's Tool union " +
			"has them, Open Responses' has only function tools). Tool also accepts " +
			"{type:\"namespace\", name, tools:[FunctionTool…]}.",
		Apply: func(doc map[string]any) error {
			return errors.Join(
				patchAdd(doc, schemas+"OpenAINamespaceTool", map[string]any{
					"type":     "object",
					"required": []any{"type", "name", "tools"},
					"properties": map[string]any{
						"type":  map[string]any{"type": "string", "enum": []any{"namespace"}},
						"name":  map[string]any{"type": "string"},
						"tools": map[string]any{"type": "array", "items": map[string]any{"$ref": "#" + schemas + "FunctionTool"}},
					},
				}),
				patchAdd(doc, schemas+"Tool/oneOf/-", map[string]any{"$ref": "#" + schemas + "OpenAINamespaceTool"}),
			)
		},
	},
}

// patchAdd is JSON Patch's "add" (RFC 6902 §4.1) on a decoded document: it sets an object member,
// or appends to an array when the last token is "-". The parent must exist.
func patchAdd(doc map[string]any, pointer string, value any) error {
	parent, last, err := patchParent(doc, pointer)
	if err != nil {
		return err
	}
	switch p := parent.(type) {
	case map[string]any:
		p[last] = value
		return nil
	case []any:
		if last != "-" {
			return fmt.Errorf("overlay %s: only appending (-) to an array is supported", pointer)
		}
		return patchReplace(doc, strings.TrimSuffix(pointer, "/-"), append(p, value))
	}
	return fmt.Errorf("overlay %s: the parent is not an object or array", pointer)
}

// patchReplace is JSON Patch's "replace" (RFC 6902 §4.3) of an object member, which must exist.
func patchReplace(doc map[string]any, pointer string, value any) error {
	parent, last, err := patchParent(doc, pointer)
	if err != nil {
		return err
	}
	m, ok := parent.(map[string]any)
	if !ok {
		return fmt.Errorf("overlay %s: the parent is not an object", pointer)
	}
	if _, ok := m[last]; !ok {
		return fmt.Errorf("overlay %s: nothing to replace", pointer)
	}
	m[last] = value
	return nil
}

// patchParent resolves all but the last token of a JSON pointer (RFC 6901) in doc.
func patchParent(doc map[string]any, pointer string) (any, string, error) {
	toks := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	var cur any = doc
	for _, tok := range toks[:len(toks)-1] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		var next any
		switch c := cur.(type) {
		case map[string]any:
			next = c[tok]
		case []any:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(c) {
				next = c[i]
			}
		}
		if next == nil {
			return nil, "", fmt.Errorf("overlay %s: %q does not exist in the document", pointer, tok)
		}
		cur = next
	}
	return cur, toks[len(toks)-1], nil
}

// Schema is a loaded OpenAPI document, overlays applied and every component compiled. Safe for
// concurrent use.
type Schema struct {
	components map[string]*jsonschema.Schema
}

// Load reads the OpenAPI document at path, applies Overlays and compiles every component schema.
func Load(path string) (*Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("orcheck: %w", err)
	}
	return load(b, Overlays)
}

func load(openapi []byte, overlays []Overlay) (*Schema, error) {
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(openapi))
	if err != nil {
		return nil, fmt.Errorf("orcheck: decode the OpenAPI document: %w", err)
	}
	doc, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("orcheck: the OpenAPI document is not an object")
	}
	for i, o := range overlays {
		if err := o.Apply(doc); err != nil {
			return nil, fmt.Errorf("orcheck: overlay %d (%.60s…): %w", i, o.Reason, err)
		}
	}
	// OpenAPI 3.1's schema dialect is JSON Schema 2020-12; the document's own keywords
	// (discriminator, example, x-…) are annotations to it.
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "mem:///openresponses.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("orcheck: %w", err)
	}
	comps, _ := doc["components"].(map[string]any)
	defs, _ := comps["schemas"].(map[string]any)
	s := &Schema{components: make(map[string]*jsonschema.Schema, len(defs))}
	for name := range defs {
		sch, err := c.Compile(url + "#" + schemas + name)
		if err != nil {
			return nil, fmt.Errorf("orcheck: compile %s: %w", name, err)
		}
		s.components[name] = sch
	}
	for _, name := range append([]string{"ResponseResource", "ItemField"}, eventComponents()...) {
		if s.components[name] == nil {
			return nil, fmt.Errorf("orcheck: the OpenAPI document has no schema %s", name)
		}
	}
	return s, nil
}

// Violation is one place where a value does not conform.
type Violation struct {
	Path    string // what, then a JSON pointer into the value, e.g. response/output/0/content/0
	Message string
}

func (v Violation) String() string { return v.Path + ": " + v.Message }

// Error lists every violation found in one value, the deepest first (the failing branch of a
// union is usually the one that got furthest).
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

// Response checks a response object (POST /responses, GET /responses/{id}, and the response of
// lifecycle events) against ResponseResource.
func (s *Schema) Response(raw []byte) error {
	return s.Validate("ResponseResource", "response", raw)
}

// Compaction checks the answer of POST /responses/compact against CompactResource.
func (s *Schema) Compaction(raw []byte) error {
	return s.Validate("CompactResource", "compaction", raw)
}

// Item checks one output item against ItemField.
func (s *Schema) Item(raw []byte) error {
	return s.Validate("ItemField", "item", raw)
}

var printer = message.NewPrinter(language.English)

// Validate checks raw against the named component schema; what names it in the error.
func (s *Schema) Validate(component, what string, raw []byte) error {
	sch := s.components[component]
	if sch == nil {
		return fmt.Errorf("orcheck: no component schema %s", component)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return &Error{What: what, Violations: []Violation{{Path: what, Message: "not JSON: " + err.Error()}}}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("orcheck: validate %s: %w", what, err)
	}
	type leaf struct {
		depth        int
		typeMismatch bool
		v            Violation
	}
	var leaves []leaf
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			p := what
			for _, tok := range e.InstanceLocation {
				p += "/" + tok
			}
			_, isEnum := e.ErrorKind.(*kind.Enum)
			_, isConst := e.ErrorKind.(*kind.Const)
			mismatch := (isEnum || isConst) && len(e.InstanceLocation) > 0 && e.InstanceLocation[len(e.InstanceLocation)-1] == "type"
			leaves = append(leaves, leaf{len(e.InstanceLocation), mismatch, Violation{Path: p, Message: e.ErrorKind.LocalizedString(printer)}})
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	// A union reports every branch that failed; the branches whose type did not match are noise
	// beside the one that did (the discriminated branch, as OpenAPI reads the union).
	branch := slices.DeleteFunc(slices.Clone(leaves), func(l leaf) bool { return l.typeMismatch })
	if len(branch) > 0 {
		leaves = branch
	}
	slices.SortStableFunc(leaves, func(a, b leaf) int { return b.depth - a.depth })
	out := &Error{What: what}
	for _, l := range leaves {
		out.Violations = append(out.Violations, l.v)
	}
	return out
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

func eventComponents() []string {
	var out []string
	for _, c := range eventSchemas {
		out = append(out, c)
	}
	return out
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
		return &Error{What: "event", Violations: []Violation{{Path: "event/type", Message: fmt.Sprintf("%q is not an Open Responses streaming event", head.Type)}}}
	}
	return s.Validate(name, head.Type, raw)
}
