package deploy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// decodeYAML decodes a YAML document (YAML 1.2, duplicate keys rejected) into the values
// encoding/json produces (map[string]any, []any, string, float64, bool, nil), so the compose file
// is checked as the JSON the Compose Specification's schema describes. Before decoding, every
// plain scalar that YAML 1.1 parsers read differently is rejected (yaml11Ambiguous): some Compose
// implementations used such parsers, and the file must mean the same to all of them.
func decodeYAML(src string) (any, error) {
	f, err := parser.ParseBytes([]byte(src), 0)
	if err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	amb := &ambiguousScalars{}
	for _, doc := range f.Docs {
		if doc.Body != nil {
			ast.Walk(amb, doc.Body)
		}
	}
	if amb.err != nil {
		return nil, amb.err
	}
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		return nil, fmt.Errorf("decode yaml: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("yaml as json: %w", err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("yaml as json: %w", err)
	}
	return out, nil
}

// yaml11Ambiguous matches the plain scalars YAML 1.1 resolves differently from YAML 1.2's core
// schema: the yes/no/on/off booleans, base-60 numbers (8080:80 in a ports list), and octal, hex,
// binary or underscored numbers. Quoted, they are strings to every parser.
var yaml11Ambiguous = regexp.MustCompile(`^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF` +
	`|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?` +
	`|[-+]?(?:0[0-9_]+|0[xXoObB][0-9a-fA-F_]+|[0-9][0-9_]*_[0-9_]*))$`)

// ambiguousScalars is an ast.Visitor that records the first plain scalar yaml11Ambiguous matches.
type ambiguousScalars struct{ err error }

func (a *ambiguousScalars) Visit(n ast.Node) ast.Visitor {
	if a.err != nil {
		return nil
	}
	tk := n.GetToken()
	switch n.Type() {
	case ast.StringType, ast.IntegerType, ast.FloatType, ast.BoolType:
		if tk != nil && tk.Type != token.SingleQuoteType && tk.Type != token.DoubleQuoteType && yaml11Ambiguous.MatchString(tk.Value) {
			a.err = fmt.Errorf("yaml line %d: plain scalar %q means different things in YAML 1.1 and 1.2; quote it", tk.Position.Line, tk.Value)
			return nil
		}
	}
	return a
}

func TestDecodeYAMLGivesTheValuesEncodingJSONWould(t *testing.T) {
	got, err := decodeYAML(`# comment
services:
  a:
    image: "postgres:17-alpine"
    command: ["--listen", ":8000", 'it''s']
    ports:
      - "8080:8080"
    environment:
      URL: postgres://u:p@h:5432/db?sslmode=disable
      EMPTY:
    healthcheck: {test: [CMD, /bin/probe], retries: 3, ratio: 0.5, disable: false}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"services": map[string]any{"a": map[string]any{
		"image":       "postgres:17-alpine",
		"command":     []any{"--listen", ":8000", "it's"},
		"ports":       []any{"8080:8080"},
		"environment": map[string]any{"URL": "postgres://u:p@h:5432/db?sslmode=disable", "EMPTY": nil},
		"healthcheck": map[string]any{"test": []any{"CMD", "/bin/probe"}, "retries": float64(3), "ratio": 0.5, "disable": false},
	}}}
	if !jsonEqualValues(got, want) {
		t.Fatalf("decoded:\n%#v\nwant:\n%#v", got, want)
	}
}

func TestDecodeYAMLRejectsDuplicateKeysAndYAML11AmbiguousScalars(t *testing.T) {
	for name, src := range map[string]string{
		"duplicate key": "a: 1\na: 2\n",
		"yes":           "a: yes\n",
		"off as a key":  "off: 1\n",
		"base 60":       "ports:\n  - 22:22\n",
		"octal":         "mode: 0700\n",
		"hex":           "n: 0x1F\n",
		"underscored":   "n: 1_000\n",
	} {
		if v, err := decodeYAML(src); err == nil {
			t.Errorf("%s: decoded %q as %#v, want an error", name, src, v)
		}
	}
	// Quoted, the same values are plain strings.
	if _, err := decodeYAML("a: \"yes\"\nports: ['22:22']\nmode: \"0700\"\n"); err != nil {
		t.Errorf("quoted values rejected: %v", err)
	}
}
