package vllmsim

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/respgate/respgate/wire"
)

// This file is the simulator's tool-calling judgement beyond the explicit triggers ("call <name>",
// "use tools", tool_choice): a tool the user's message is about is called, as a real model would
// call get_weather for "What's the weather like in San Francisco?", and every call's arguments are
// built from the tool's JSON schema so that they validate against it. The rules are in the package
// doc ("Deterministic answers").

// genericWords are the words of tool names and descriptions that say what a tool does rather than
// what it is about ("get", "list", "current"…): a user's message using them is not about the tool.
var genericWords = setOf("get", "set", "fetch", "list", "find", "search", "query", "lookup", "look", "call",
	"run", "make", "create", "update", "delete", "remove", "add", "read", "write", "send", "check", "show",
	"retrieve", "return", "returns", "current", "info", "information", "data", "tool", "function", "the",
	"and", "for", "with", "from", "into", "about", "that", "this", "given", "specified", "provided",
	"user", "value", "values", "result", "results", "using", "which", "when", "will", "should", "some",
	"what", "your", "their", "them", "there", "here", "also", "each", "every", "other", "string",
	"number", "object", "named", "name", "like")

func setOf(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// topicTools returns the tools (in the tools' order) that text is about: text has a word that is
// a topic word of the tool, allowing a plural "s"/"es" either way. A tool's topic words are the
// words of its name (split at "_", "-", ".", spaces and camelCase humps) of 3 letters or more, and
// the words of its description of 4 letters or more, less genericWords.
func topicTools(tools []functionTool, text string) []functionTool {
	said := map[string]bool{}
	for _, w := range splitWords(text) {
		said[w] = true
	}
	var out []functionTool
	for _, t := range tools {
		if about(t, said) {
			t.topic = true
			out = append(out, t)
		}
	}
	return out
}

func about(t functionTool, said map[string]bool) bool {
	for _, src := range []struct {
		text string
		min  int
	}{{t.name, 3}, {t.description, 4}} {
		for _, w := range splitWords(src.text) {
			if utf8.RuneCountInString(w) < src.min || genericWords[w] {
				continue
			}
			if said[w] || said[w+"s"] || said[w+"es"] || (strings.HasSuffix(w, "s") && said[strings.TrimSuffix(w, "s")]) {
				return true
			}
		}
	}
	return false
}

// splitWords lowercases s and splits it into runs of letters and digits, also at a lower-to-upper
// case change (camelCase).
func splitWords(s string) []string {
	var out []string
	var cur []rune
	prevLower := false
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if unicode.IsUpper(r) && prevLower {
				flush()
			}
			cur = append(cur, r)
			prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
		default:
			flush()
			prevLower = false
		}
	}
	flush()
	return out
}

// schema is the part of a JSON schema the arguments are built from.
type schema struct {
	Type                 json.RawMessage   `json:"type"`
	Enum                 []json.RawMessage `json:"enum"`
	Const                json.RawMessage   `json:"const"`
	Properties           json.RawMessage   `json:"properties"`
	Required             []string          `json:"required"`
	Items                json.RawMessage   `json:"items"`
	AnyOf                []json.RawMessage `json:"anyOf"`
	OneOf                []json.RawMessage `json:"oneOf"`
	Minimum              *float64          `json:"minimum"`
	Maximum              *float64          `json:"maximum"`
	AdditionalProperties json.RawMessage   `json:"additionalProperties"`
}

// argGen builds one call's arguments: value is a string parameter's value (the last user text,
// whitespace collapsed), text the last user text as written (numbers, enum values and, for a tool
// called by topic, places are read from it).
type argGen struct {
	value, text string
	topic       bool
}

// arguments is the call's arguments: a JSON object that fits the tool's parameters schema.
func (t functionTool) arguments(value, text string) []byte {
	g := argGen{value: value, text: text, topic: t.topic}
	var s schema
	if isNull(t.params) || json.Unmarshal(t.params, &s) != nil {
		return g.object(nil, &schema{}, true, 0)
	}
	return g.object(nil, &s, true, 0)
}

// object appends the object schema s describes: its required properties in order; without any,
// its first property; without properties, {"query": value} at the top level (where the schema
// allows other properties) and {} below it.
func (g argGen) object(b []byte, s *schema, top bool, depth int) []byte {
	props := orderedMembers(s.Properties)
	keys := s.Required
	if len(keys) == 0 && len(props) > 0 {
		keys = []string{props[0].key}
	}
	if len(keys) == 0 && top && string(bytes.TrimSpace(s.AdditionalProperties)) != "false" {
		keys = []string{"query"}
	}
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendString(b, k)
		b = append(b, ':')
		var ps schema
		for _, p := range props {
			if p.key == k {
				_ = json.Unmarshal(p.raw, &ps)
				break
			}
		}
		b = g.value1(b, &ps, k, depth)
	}
	return append(b, '}')
}

const maxSchemaDepth = 8

// value1 appends a value that fits s, for the property key.
func (g argGen) value1(b []byte, s *schema, key string, depth int) []byte {
	if depth > maxSchemaDepth {
		return append(b, "null"...)
	}
	if len(s.Const) > 0 {
		return appendRaw(b, s.Const, "null")
	}
	if len(s.Enum) > 0 {
		return appendRaw(b, g.pickEnum(s.Enum), "null")
	}
	for _, alts := range [][]json.RawMessage{s.AnyOf, s.OneOf} {
		for _, raw := range alts {
			var alt schema
			if json.Unmarshal(raw, &alt) == nil && alt.typeName() != "null" {
				return g.value1(b, &alt, key, depth+1)
			}
		}
	}
	switch s.typeName() {
	case "object":
		return g.object(b, s, false, depth+1)
	case "array":
		var item schema
		if !isNull(s.Items) {
			_ = json.Unmarshal(s.Items, &item)
		}
		return append(g.value1(append(b, '['), &item, key, depth+1), ']')
	case "integer":
		n, ok := firstNumber(g.text)
		return strconv.AppendInt(b, int64(s.clamp(n, ok)), 10)
	case "number":
		n, ok := firstNumber(g.text)
		return strconv.AppendFloat(b, s.clamp(n, ok), 'f', -1, 64)
	case "boolean":
		return append(b, "true"...)
	case "null":
		return append(b, "null"...)
	}
	if g.topic && placeKey(key) {
		if p := place(g.text); p != "" {
			return wire.AppendString(b, p)
		}
	}
	return wire.AppendString(b, g.value)
}

// typeName is the schema's type, the first one other than "null" when it lists several; "" when
// absent.
func (s *schema) typeName() string {
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return one
	}
	var many []string
	_ = json.Unmarshal(s.Type, &many)
	for _, t := range many {
		if t != "null" {
			return t
		}
	}
	if len(many) > 0 {
		return "null"
	}
	return ""
}

// clamp is n (when the text had a number) or else the minimum, or else 1, kept within the bounds.
func (s *schema) clamp(n float64, ok bool) float64 {
	if !ok {
		n = 1
		if s.Minimum != nil {
			n = *s.Minimum
		}
	}
	if s.Minimum != nil && n < *s.Minimum {
		n = *s.Minimum
	}
	if s.Maximum != nil && n > *s.Maximum {
		n = *s.Maximum
	}
	return n
}

// pickEnum is the first enum value the text names as a word (string values, any case), else the
// first one.
func (g argGen) pickEnum(enum []json.RawMessage) json.RawMessage {
	said := map[string]bool{}
	for _, w := range splitWords(g.text) {
		said[w] = true
	}
	for _, raw := range enum {
		var v string
		if json.Unmarshal(raw, &v) == nil && v != "" && said[strings.ToLower(v)] {
			return raw
		}
	}
	return enum[0]
}

// firstNumber is the first decimal number written in text.
func firstNumber(text string) (float64, bool) {
	for i := 0; i < len(text); i++ {
		if text[i] < '0' || text[i] > '9' {
			continue
		}
		start, end := i, i
		if start > 0 && text[start-1] == '-' {
			start--
		}
		for end < len(text) && (text[end] >= '0' && text[end] <= '9' || text[end] == '.' && end+1 < len(text) && text[end+1] >= '0' && text[end+1] <= '9') {
			end++
		}
		if n, err := strconv.ParseFloat(text[start:end], 64); err == nil {
			return n, true
		}
		i = end
	}
	return 0, false
}

// placeKey reports whether a property named key holds a place.
func placeKey(key string) bool {
	k := strings.ToLower(key)
	for _, w := range []string{"location", "city", "place", "address", "country", "region", "town", "destination"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// place is the first run of capitalised words after "in", "at", "near" or "for" in text
// ("San Francisco" in "What's the weather like in San Francisco?"); it stops after a word followed by
// punctuation. "" when there is none.
func place(text string) string {
	fields := strings.Fields(text)
	for i := 0; i+1 < len(fields); i++ {
		switch strings.ToLower(fields[i]) {
		case "in", "at", "near", "for":
		default:
			continue
		}
		var run []string
		for _, f := range fields[i+1:] {
			w := strings.TrimRightFunc(f, unicode.IsPunct)
			r, _ := utf8.DecodeRuneInString(w)
			if w == "" || !unicode.IsUpper(r) {
				break
			}
			run = append(run, w)
			if w != f {
				break
			}
		}
		if len(run) > 0 {
			return strings.Join(run, " ")
		}
	}
	return ""
}

// member is one member of a JSON object, in document order.
type member struct {
	key string
	raw json.RawMessage
}

// orderedMembers returns the members of the JSON object raw in the order they are written
// (encoding/json's maps lose it, and "the first property" needs it); nil when raw is not an object.
func orderedMembers(raw json.RawMessage) []member {
	if isNull(raw) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return out
		}
		out = append(out, member{key, v})
	}
	return out
}
