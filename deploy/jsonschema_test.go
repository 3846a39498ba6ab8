package deploy

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// schemaValidator validates values (as parseYAML or encoding/json produce them) against a JSON
// Schema (draft-07). It implements the keywords the Compose Specification's schema uses, plus a few
// neighbours that cost nothing: $ref (to #/…), type, enum, const, properties, patternProperties,
// additionalProperties, required, items (single and tuple), oneOf, anyOf, allOf, not, pattern,
// uniqueItems, minimum/maximum (and exclusive), min/max items, length and properties. Annotation
// keywords are ignored ($schema, $id, $comment, title, description, default, deprecated, examples,
// definitions) and so is format, as the brief allows. Any other keyword anywhere in the schema is an
// error when the validator is built, so a newer schema cannot be validated half-way in silence.
type schemaValidator struct {
	root     any
	patterns map[string]*regexp.Regexp
}

var (
	schemaAnnotations = []string{"$schema", "$id", "id", "$comment", "title", "description", "default", "deprecated", "examples", "definitions", "format"}
	schemaKeywords    = []string{"$ref", "type", "enum", "const", "properties", "patternProperties", "additionalProperties",
		"required", "items", "oneOf", "anyOf", "allOf", "not", "pattern", "uniqueItems", "minimum", "maximum",
		"exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"}
)

func newSchemaValidator(schemaJSON []byte) (*schemaValidator, error) {
	var root any
	if err := json.Unmarshal(schemaJSON, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	v := &schemaValidator{root: root, patterns: map[string]*regexp.Regexp{}}
	if err := v.check(root, "#"); err != nil {
		return nil, err
	}
	return v, nil
}

// check walks every subschema once: unknown keywords, uncompilable patterns and dangling $refs fail.
func (v *schemaValidator) check(s any, at string) error {
	if _, ok := s.(bool); ok {
		return nil
	}
	m, ok := s.(map[string]any)
	if !ok {
		return fmt.Errorf("schema %s: not an object or boolean", at)
	}
	for _, k := range sortedKeys(m) {
		val := m[k]
		switch {
		case slices.Contains(schemaAnnotations, k):
			if k == "definitions" {
				defs, ok := val.(map[string]any)
				if !ok {
					return fmt.Errorf("schema %s/definitions: not an object", at)
				}
				for _, name := range sortedKeys(defs) {
					if err := v.check(defs[name], at+"/definitions/"+name); err != nil {
						return err
					}
				}
			}
		case !slices.Contains(schemaKeywords, k):
			return fmt.Errorf("schema %s: unsupported keyword %q (extend the validator before using this schema)", at, k)
		case k == "$ref":
			ref, _ := val.(string)
			if _, err := v.resolve(ref); err != nil {
				return fmt.Errorf("schema %s: %v", at, err)
			}
		case k == "properties" || k == "patternProperties":
			props, ok := val.(map[string]any)
			if !ok {
				return fmt.Errorf("schema %s/%s: not an object", at, k)
			}
			for _, name := range sortedKeys(props) {
				if k == "patternProperties" {
					if _, err := v.regexp(name); err != nil {
						return fmt.Errorf("schema %s: %v", at, err)
					}
				}
				if err := v.check(props[name], at+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		case k == "additionalProperties" || k == "not":
			if err := v.check(val, at+"/"+k); err != nil {
				return err
			}
		case k == "items":
			if list, ok := val.([]any); ok {
				for i, s := range list {
					if err := v.check(s, fmt.Sprintf("%s/items/%d", at, i)); err != nil {
						return err
					}
				}
			} else if err := v.check(val, at+"/items"); err != nil {
				return err
			}
		case k == "oneOf" || k == "anyOf" || k == "allOf":
			list, ok := val.([]any)
			if !ok || len(list) == 0 {
				return fmt.Errorf("schema %s/%s: not a non-empty array", at, k)
			}
			for i, s := range list {
				if err := v.check(s, fmt.Sprintf("%s/%s/%d", at, k, i)); err != nil {
					return err
				}
			}
		case k == "pattern":
			p, _ := val.(string)
			if _, err := v.regexp(p); err != nil {
				return fmt.Errorf("schema %s: %v", at, err)
			}
		case k == "type":
			for _, t := range typeList(val) {
				if !slices.Contains([]string{"object", "array", "string", "number", "integer", "boolean", "null"}, t) {
					return fmt.Errorf("schema %s: unknown type %q", at, t)
				}
			}
		}
	}
	return nil
}

func (v *schemaValidator) regexp(p string) (*regexp.Regexp, error) {
	if re, ok := v.patterns[p]; ok {
		return re, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %v", p, err)
	}
	v.patterns[p] = re
	return re, nil
}

// resolve follows a local JSON pointer reference ("#", "#/definitions/x").
func (v *schemaValidator) resolve(ref string) (any, error) {
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q: only local references are supported", ref)
	}
	cur := v.root
	if ref == "#" {
		return cur, nil
	}
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
	}
	return cur, nil
}

// Validate returns every violation, each as "path: message", sorted.
func (v *schemaValidator) Validate(inst any) []string {
	errs := v.validate(v.root, inst, "$")
	sort.Strings(errs)
	return errs
}

func (v *schemaValidator) validate(s, inst any, path string) []string {
	if b, ok := s.(bool); ok {
		if b {
			return nil
		}
		return []string{path + ": not allowed here"}
	}
	m := s.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		// Draft-07: a $ref's siblings are ignored.
		target, err := v.resolve(ref)
		if err != nil {
			return []string{path + ": " + err.Error()}
		}
		return v.validate(target, inst, path)
	}
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, a...)) }

	if t, ok := m["type"]; ok {
		types := typeList(t)
		if !slices.ContainsFunc(types, func(t string) bool { return hasType(inst, t) }) {
			add("is %s, want %s", typeName(inst), strings.Join(types, " or "))
			return errs // the other keywords would only repeat the mismatch
		}
	}
	if e, ok := m["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return jsonEqualValues(x, inst) }) {
		add("%s is not one of %s", jsonText(inst), jsonText(e))
	}
	if c, ok := m["const"]; ok && !jsonEqualValues(c, inst) {
		add("%s is not %s", jsonText(inst), jsonText(c))
	}

	switch x := inst.(type) {
	case map[string]any:
		errs = append(errs, v.object(m, x, path)...)
	case []any:
		errs = append(errs, v.array(m, x, path)...)
	case string:
		if p, ok := m["pattern"].(string); ok {
			if re, _ := v.regexp(p); !re.MatchString(x) {
				add("%q does not match %q", x, p)
			}
		}
		n := float64(len([]rune(x)))
		if lim, ok := num(m["minLength"]); ok && n < lim {
			add("shorter than %v", lim)
		}
		if lim, ok := num(m["maxLength"]); ok && n > lim {
			add("longer than %v", lim)
		}
	}
	if f, isNum := num(inst); isNum {
		if lim, ok := num(m["minimum"]); ok && f < lim {
			add("%v is less than %v", f, lim)
		}
		if lim, ok := num(m["maximum"]); ok && f > lim {
			add("%v is greater than %v", f, lim)
		}
		if lim, ok := num(m["exclusiveMinimum"]); ok && f <= lim {
			add("%v is not greater than %v", f, lim)
		}
		if lim, ok := num(m["exclusiveMaximum"]); ok && f >= lim {
			add("%v is not less than %v", f, lim)
		}
	}

	if list, ok := m["allOf"].([]any); ok {
		for _, sub := range list {
			errs = append(errs, v.validate(sub, inst, path)...)
		}
	}
	if list, ok := m["anyOf"].([]any); ok {
		var best []string
		matched := false
		for _, sub := range list {
			e := v.validate(sub, inst, path)
			if len(e) == 0 {
				matched = true
				break
			}
			if best == nil || len(e) < len(best) {
				best = e
			}
		}
		if !matched {
			add("matches none of anyOf; closest: %s", strings.Join(best, "; "))
		}
	}
	if list, ok := m["oneOf"].([]any); ok {
		var best []string
		n := 0
		for _, sub := range list {
			e := v.validate(sub, inst, path)
			if len(e) == 0 {
				n++
			} else if best == nil || len(e) < len(best) {
				best = e
			}
		}
		switch {
		case n == 0:
			add("matches none of oneOf; closest: %s", strings.Join(best, "; "))
		case n > 1:
			add("matches %d of oneOf, want exactly 1", n)
		}
	}
	if sub, ok := m["not"]; ok && len(v.validate(sub, inst, path)) == 0 {
		add("matches a schema it must not match")
	}
	return errs
}

func (v *schemaValidator) object(m, x map[string]any, path string) []string {
	var errs []string
	for _, r := range asStrings(m["required"]) {
		if _, ok := x[r]; !ok {
			errs = append(errs, fmt.Sprintf("%s: missing required property %q", path, r))
		}
	}
	props, _ := m["properties"].(map[string]any)
	pprops, _ := m["patternProperties"].(map[string]any)
	for _, k := range sortedKeys(x) {
		sub := path + "." + k
		matched := false
		if s, ok := props[k]; ok {
			matched = true
			errs = append(errs, v.validate(s, x[k], sub)...)
		}
		for _, p := range sortedKeys(pprops) {
			if re, _ := v.regexp(p); re.MatchString(k) {
				matched = true
				errs = append(errs, v.validate(pprops[p], x[k], sub)...)
			}
		}
		if !matched {
			if ap, ok := m["additionalProperties"]; ok {
				if b, isBool := ap.(bool); isBool && !b {
					errs = append(errs, fmt.Sprintf("%s: additional property %q is not allowed", path, k))
				} else if !isBool {
					errs = append(errs, v.validate(ap, x[k], sub)...)
				}
			}
		}
	}
	n := float64(len(x))
	if lim, ok := num(m["minProperties"]); ok && n < lim {
		errs = append(errs, fmt.Sprintf("%s: fewer than %v properties", path, lim))
	}
	if lim, ok := num(m["maxProperties"]); ok && n > lim {
		errs = append(errs, fmt.Sprintf("%s: more than %v properties", path, lim))
	}
	return errs
}

func (v *schemaValidator) array(m map[string]any, x []any, path string) []string {
	var errs []string
	switch items := m["items"].(type) {
	case []any:
		for i := 0; i < len(items) && i < len(x); i++ {
			errs = append(errs, v.validate(items[i], x[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
	case nil:
	default:
		for i, el := range x {
			errs = append(errs, v.validate(items, el, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	if u, _ := m["uniqueItems"].(bool); u {
		for i := range x {
			for j := i + 1; j < len(x); j++ {
				if jsonEqualValues(x[i], x[j]) {
					errs = append(errs, fmt.Sprintf("%s: items %d and %d are equal", path, i, j))
				}
			}
		}
	}
	n := float64(len(x))
	if lim, ok := num(m["minItems"]); ok && n < lim {
		errs = append(errs, fmt.Sprintf("%s: fewer than %v items", path, lim))
	}
	if lim, ok := num(m["maxItems"]); ok && n > lim {
		errs = append(errs, fmt.Sprintf("%s: more than %v items", path, lim))
	}
	return errs
}

func typeList(t any) []string {
	switch x := t.(type) {
	case string:
		return []string{x}
	case []any:
		return asStrings(x)
	}
	return nil
}

func asStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func hasType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		_, ok := num(v)
		return ok
	case "integer":
		f, ok := num(v)
		return ok && f == math.Trunc(f)
	}
	return false
}

func typeName(v any) string {
	for _, t := range []string{"null", "boolean", "integer", "number", "string", "array", "object"} {
		if hasType(v, t) {
			return t
		}
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// jsonEqualValues compares two decoded JSON values, numbers by value.
func jsonEqualValues(a, b any) bool {
	if fa, ok := num(a); ok {
		fb, ok := num(b)
		return ok && fa == fb
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqualValues(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqualValues(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func TestSchemaValidatorKeywords(t *testing.T) {
	schema := `{
	  "$schema": "https://json-schema.org/draft-07/schema",
	  "type": "object",
	  "required": ["name"],
	  "additionalProperties": false,
	  "patternProperties": {"^x-": {}},
	  "properties": {
	    "name": {"type": "string", "pattern": "^[a-z]+$"},
	    "n": {"type": "integer", "minimum": 1, "maximum": 3},
	    "mode": {"enum": ["a", "b"]},
	    "list": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
	    "either": {"oneOf": [{"type": "string"}, {"$ref": "#/definitions/obj"}]},
	    "any": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}
	  },
	  "definitions": {"obj": {"type": "object", "properties": {"k": {"type": "number"}}, "additionalProperties": false}}
	}`
	v, err := newSchemaValidator([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]any{"name": "abc", "n": int64(2), "mode": "a", "list": []any{"x", "y"},
		"either": map[string]any{"k": 1.5}, "any": nil, "x-ext": []any{1}}
	if errs := v.Validate(ok); len(errs) != 0 {
		t.Fatalf("valid instance rejected: %v", errs)
	}
	for name, inst := range map[string]map[string]any{
		"missing required": {},
		"pattern":          {"name": "ABC"},
		"not integer":      {"name": "a", "n": 1.5},
		"above maximum":    {"name": "a", "n": int64(4)},
		"enum":             {"name": "a", "mode": "c"},
		"items type":       {"name": "a", "list": []any{int64(1)}},
		"unique":           {"name": "a", "list": []any{"x", "x"}},
		"oneOf none":       {"name": "a", "either": map[string]any{"k": "str"}},
		"additional":       {"name": "a", "other": true},
		"anyOf none":       {"name": "a", "any": "s"},
		"ref additional":   {"name": "a", "either": map[string]any{"z": 1}},
	} {
		if errs := v.Validate(inst); len(errs) == 0 {
			t.Errorf("%s: %v validated, want an error", name, inst)
		}
	}
	if _, err := newSchemaValidator([]byte(`{"properties": {"a": {"if": {"type": "string"}}}}`)); err == nil {
		t.Error("an unsupported keyword (if) was accepted")
	}
	if _, err := newSchemaValidator([]byte(`{"$ref": "#/definitions/missing"}`)); err == nil {
		t.Error("a dangling $ref was accepted")
	}
}
