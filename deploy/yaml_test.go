package deploy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// parseYAML parses the strict YAML subset the deployment files are written in, into the values
// encoding/json would produce (map[string]any, []any, string, int64, float64, bool, nil):
//
//   - block mappings and block sequences (including "- key: value" entries and "key:" followed by a
//     sequence at the same indentation), indented with spaces;
//   - single-line flow sequences and mappings: [a, "b"], {k: v}, [], {};
//   - plain, 'single-quoted' and "double-quoted" scalars; plain scalars resolve as in YAML 1.2's core
//     schema (null, true/false, decimal integers and floats; everything else is a string);
//   - # comments.
//
// Everything else fails loudly instead of being guessed: tabs in indentation, anchors, aliases,
// tags, merge keys, block scalars (| and >), multi-line plain or quoted scalars, multiple documents,
// directives, complex keys, duplicate keys, and plain scalars YAML 1.1 parsers (which some Compose
// implementations used) read differently: yes/no/on/off/y/n, base-60 numbers such as 8080:80,
// octal and hex numbers, .inf and .nan. Quote such values.
func parseYAML(src string) (any, error) {
	p := &yamlParser{}
	if err := p.split(src); err != nil {
		return nil, err
	}
	if len(p.lines) == 0 {
		return nil, nil
	}
	if p.lines[0].indent != 0 {
		return nil, p.errf(0, "the document must start at column 1")
	}
	v, err := p.block(0)
	if err != nil {
		return nil, err
	}
	if p.i < len(p.lines) {
		return nil, p.errf(p.i, "unexpected indentation or content")
	}
	return v, nil
}

type yamlLine struct {
	num    int // 1-based line number in the source
	indent int
	text   string // without indentation and comment, right-trimmed
}

type yamlParser struct {
	lines []yamlLine
	i     int
}

func (p *yamlParser) errf(i int, format string, a ...any) error {
	num := 0
	switch {
	case i < len(p.lines):
		num = p.lines[i].num
	case len(p.lines) > 0:
		num = p.lines[len(p.lines)-1].num
	}
	return fmt.Errorf("yaml line %d: %s", num, fmt.Sprintf(format, a...))
}

// split turns the source into content lines, dropping blank and comment-only lines.
func (p *yamlParser) split(src string) error {
	if strings.HasPrefix(src, "\ufeff") {
		return fmt.Errorf("yaml: byte order mark not supported")
	}
	for n, raw := range strings.Split(src, "\n") {
		raw = strings.TrimSuffix(raw, "\r")
		indent := 0
		for indent < len(raw) && raw[indent] == ' ' {
			indent++
		}
		rest := raw[indent:]
		if strings.HasPrefix(rest, "\t") {
			return fmt.Errorf("yaml line %d: tab in indentation", n+1)
		}
		text, err := stripComment(rest)
		if err != nil {
			return fmt.Errorf("yaml line %d: %v", n+1, err)
		}
		text = strings.TrimRight(text, " \t")
		if text == "" {
			continue
		}
		if indent == 0 && (strings.HasPrefix(text, "---") || strings.HasPrefix(text, "...") || strings.HasPrefix(text, "%")) {
			return fmt.Errorf("yaml line %d: document markers and directives are not supported", n+1)
		}
		p.lines = append(p.lines, yamlLine{num: n + 1, indent: indent, text: text})
	}
	return nil
}

// stripComment removes a # comment (a # at the start or after whitespace, outside quotes).
func stripComment(s string) (string, error) {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				quote = 0
			}
		case quote == '\'':
			if c == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					i++
				} else {
					quote = 0
				}
			}
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i], nil
		case (c == '"' || c == '\'') && startsScalar(s, i):
			quote = c
		}
	}
	if quote != 0 {
		return "", fmt.Errorf("unterminated quoted scalar (multi-line scalars are not supported)")
	}
	return s, nil
}

// startsScalar reports whether a quote at s[i] opens a quoted scalar: it starts the line or follows
// an indicator ("- ", ": ", "[", "{", ",") plus optional spaces. A quote inside a plain scalar
// (it's) does not.
func startsScalar(s string, i int) bool {
	j := i - 1
	for j >= 0 && s[j] == ' ' {
		j--
	}
	if j < 0 {
		return true
	}
	switch s[j] {
	case '[', '{', ',':
		return true
	case '-', ':', '?':
		return j < i-1 // the indicator must be followed by a space
	}
	return false
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

// block parses the node whose lines start at p.i with the given indentation.
func (p *yamlParser) block(indent int) (any, error) {
	if p.i >= len(p.lines) || p.lines[p.i].indent != indent {
		return nil, p.errf(p.i, "expected content at indentation %d", indent)
	}
	if isSeqItem(p.lines[p.i].text) {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func (p *yamlParser) sequence(indent int) ([]any, error) {
	out := []any{}
	for p.i < len(p.lines) && p.lines[p.i].indent == indent && isSeqItem(p.lines[p.i].text) {
		ln := p.lines[p.i]
		rest := strings.TrimPrefix(ln.text, "-")
		trimmed := strings.TrimLeft(rest, " ")
		if trimmed == "" {
			p.i++
			if p.i < len(p.lines) && p.lines[p.i].indent > indent {
				v, err := p.block(p.lines[p.i].indent)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			} else {
				out = append(out, nil)
			}
			continue
		}
		col := indent + 1 + (len(rest) - len(trimmed))
		if isSeqItem(trimmed) {
			return nil, p.errf(p.i, "nested sequence on one line (- - x) is not supported")
		}
		if _, _, ok, err := splitKey(trimmed); err != nil {
			return nil, p.errf(p.i, "%v", err)
		} else if ok {
			// "- key: value": a mapping whose first entry sits on the dash's line.
			p.lines[p.i] = yamlLine{num: ln.num, indent: col, text: trimmed}
			v, err := p.mapping(col)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		v, err := p.inlineValue(p.i, trimmed)
		if err != nil {
			return nil, err
		}
		p.i++
		if p.i < len(p.lines) && p.lines[p.i].indent > indent {
			return nil, p.errf(p.i, "multi-line scalars are not supported")
		}
		out = append(out, v)
	}
	if p.i < len(p.lines) && p.lines[p.i].indent > indent {
		return nil, p.errf(p.i, "unexpected indentation")
	}
	return out, nil
}

func (p *yamlParser) mapping(indent int) (map[string]any, error) {
	out := map[string]any{}
	for p.i < len(p.lines) && p.lines[p.i].indent == indent {
		ln := p.lines[p.i]
		if isSeqItem(ln.text) {
			return nil, p.errf(p.i, "a sequence item where a mapping key was expected")
		}
		key, val, ok, err := splitKey(ln.text)
		if err != nil {
			return nil, p.errf(p.i, "%v", err)
		}
		if !ok {
			return nil, p.errf(p.i, "expected \"key: value\"")
		}
		if key == "<<" {
			return nil, p.errf(p.i, "merge keys (<<) are not supported")
		}
		if _, dup := out[key]; dup {
			return nil, p.errf(p.i, "duplicate key %q", key)
		}
		p.i++
		if val == "" {
			switch {
			case p.i < len(p.lines) && p.lines[p.i].indent > indent:
				v, err := p.block(p.lines[p.i].indent)
				if err != nil {
					return nil, err
				}
				out[key] = v
			case p.i < len(p.lines) && p.lines[p.i].indent == indent && isSeqItem(p.lines[p.i].text):
				v, err := p.sequence(indent)
				if err != nil {
					return nil, err
				}
				out[key] = v
			default:
				out[key] = nil
			}
			continue
		}
		v, err := p.inlineValue(p.i-1, val)
		if err != nil {
			return nil, err
		}
		if p.i < len(p.lines) && p.lines[p.i].indent > indent {
			return nil, p.errf(p.i, "multi-line scalars are not supported (or a value and a nested block under one key)")
		}
		out[key] = v
	}
	if p.i < len(p.lines) && p.lines[p.i].indent > indent {
		return nil, p.errf(p.i, "unexpected indentation")
	}
	return out, nil
}

// splitKey splits "key: value" (or "key:") at the first ": " outside quotes and flow brackets. ok
// is false when the text is not a mapping entry.
func splitKey(text string) (key, val string, ok bool, err error) {
	if strings.HasPrefix(text, "? ") || text == "?" {
		return "", "", false, fmt.Errorf("complex keys (?) are not supported")
	}
	if text[0] == '[' || text[0] == '{' {
		return "", "", false, nil
	}
	end := -1
	if text[0] == '"' || text[0] == '\'' {
		n, qerr := quotedLen(text)
		if qerr != nil {
			return "", "", false, qerr
		}
		if n < len(text) && text[n] == ':' && (n+1 == len(text) || text[n+1] == ' ') {
			end = n
		} else {
			return "", "", false, nil
		}
	} else {
		for i := 0; i < len(text); i++ {
			if text[i] == ':' && (i+1 == len(text) || text[i+1] == ' ') {
				end = i
				break
			}
		}
		if end < 0 {
			return "", "", false, nil
		}
	}
	rawKey := strings.TrimRight(text[:end], " ")
	if rawKey == "" {
		return "", "", false, fmt.Errorf("empty key")
	}
	k, kerr := scalar(rawKey, false)
	if kerr != nil {
		return "", "", false, fmt.Errorf("key: %v", kerr)
	}
	switch kv := k.(type) {
	case string:
		key = kv
	default:
		// Keys are strings in every file this parser reads; a quoted key says so explicitly.
		key = rawKey
	}
	return key, strings.TrimLeft(text[end+1:], " "), true, nil
}

// quotedLen returns the length of the quoted scalar at the start of s, quotes included.
func quotedLen(s string) (int, error) {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q:
			if q == '\'' && i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated quoted scalar")
}

// inlineValue parses a value written on one line: a flow collection or a scalar.
func (p *yamlParser) inlineValue(i int, s string) (any, error) {
	switch s[0] {
	case '&', '*', '!':
		return nil, p.errf(i, "anchors, aliases and tags are not supported")
	case '|', '>':
		return nil, p.errf(i, "block scalars (| and >) are not supported")
	case '[', '{':
		v, n, err := flow(s)
		if err != nil {
			return nil, p.errf(i, "%v", err)
		}
		if strings.TrimSpace(s[n:]) != "" {
			return nil, p.errf(i, "text after a flow collection: %q", s[n:])
		}
		return v, nil
	}
	v, err := scalar(s, false)
	if err != nil {
		return nil, p.errf(i, "%v", err)
	}
	return v, nil
}

// flow parses a flow collection at the start of s and returns it and the bytes it used.
func flow(s string) (any, int, error) {
	open := s[0]
	closer := byte(']')
	if open == '{' {
		closer = '}'
	}
	var seq []any
	m := map[string]any{}
	i := 1
	skip := func() {
		for i < len(s) && s[i] == ' ' {
			i++
		}
	}
	skip()
	if i < len(s) && s[i] == closer {
		if open == '[' {
			return []any{}, i + 1, nil
		}
		return m, i + 1, nil
	}
	for {
		skip()
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated flow collection")
		}
		var key string
		if open == '{' {
			k, n, err := flowScalarText(s[i:], true)
			if err != nil {
				return nil, 0, err
			}
			kv, err := scalar(k, true)
			if err != nil {
				return nil, 0, err
			}
			ks, isStr := kv.(string)
			if !isStr {
				ks = k
			}
			key = ks
			i += n
			skip()
			if i >= len(s) || s[i] != ':' {
				return nil, 0, fmt.Errorf("flow mapping entry without ':'")
			}
			i++
			skip()
			if _, dup := m[key]; dup {
				return nil, 0, fmt.Errorf("duplicate key %q", key)
			}
		}
		var v any
		if i < len(s) && (s[i] == '[' || s[i] == '{') {
			fv, n, err := flow(s[i:])
			if err != nil {
				return nil, 0, err
			}
			v, i = fv, i+n
		} else {
			t, n, err := flowScalarText(s[i:], false)
			if err != nil {
				return nil, 0, err
			}
			if t == "" {
				return nil, 0, fmt.Errorf("empty entry in a flow collection")
			}
			if v, err = scalar(t, true); err != nil {
				return nil, 0, err
			}
			i += n
		}
		if open == '{' {
			m[key] = v
		} else {
			seq = append(seq, v)
		}
		skip()
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated flow collection")
		}
		switch s[i] {
		case ',':
			i++
			skip()
			if i < len(s) && s[i] == closer {
				return nil, 0, fmt.Errorf("trailing comma in a flow collection")
			}
		case closer:
			if open == '[' {
				return seq, i + 1, nil
			}
			return m, i + 1, nil
		default:
			return nil, 0, fmt.Errorf("unexpected %q in a flow collection", s[i])
		}
	}
}

// flowScalarText returns the text of the scalar at the start of s inside a flow collection.
func flowScalarText(s string, key bool) (string, int, error) {
	if s != "" && (s[0] == '"' || s[0] == '\'') {
		n, err := quotedLen(s)
		return s[:n], n, err
	}
	i := 0
	for i < len(s) {
		c := s[i]
		if c == ',' || c == ']' || c == '}' || c == '[' || c == '{' {
			break
		}
		if key && c == ':' {
			break
		}
		if c == ':' && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == ',') {
			return "", 0, fmt.Errorf("': ' inside a flow sequence scalar; quote it")
		}
		i++
	}
	return strings.TrimRight(s[:i], " "), i, nil
}

var (
	yamlInt      = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)
	yamlFloat    = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
	yamlBase60   = regexp.MustCompile(`^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$`)
	yamlAmbigNum = regexp.MustCompile(`^[-+]?(0[0-9_]+|0[xXoObB][0-9a-fA-F_]+|[0-9][0-9_]*_[0-9_]*)$`)
	yamlAmbigLit = map[string]bool{
		"y": true, "Y": true, "n": true, "N": true, "yes": true, "Yes": true, "YES": true,
		"no": true, "No": true, "NO": true, "on": true, "On": true, "ON": true,
		"off": true, "Off": true, "OFF": true,
		".inf": true, ".Inf": true, ".INF": true, "-.inf": true, "+.inf": true, ".nan": true, ".NaN": true, ".NAN": true,
	}
)

// scalar resolves one scalar's text (quotes included when quoted).
func scalar(s string, inFlow bool) (any, error) {
	if s == "" {
		return nil, nil
	}
	switch s[0] {
	case '"':
		n, err := quotedLen(s)
		if err != nil {
			return nil, err
		}
		if n != len(s) {
			return nil, fmt.Errorf("text after a quoted scalar: %q", s[n:])
		}
		return unescapeDouble(s[1 : n-1])
	case '\'':
		n, err := quotedLen(s)
		if err != nil {
			return nil, err
		}
		if n != len(s) {
			return nil, fmt.Errorf("text after a quoted scalar: %q", s[n:])
		}
		return strings.ReplaceAll(s[1:n-1], "''", "'"), nil
	case '&', '*', '!':
		return nil, fmt.Errorf("anchors, aliases and tags are not supported")
	case '|', '>':
		return nil, fmt.Errorf("block scalars are not supported")
	case '@', '`', '%':
		return nil, fmt.Errorf("a plain scalar cannot start with %q; quote it", s[0])
	case '[', ']', '{', '}', ',':
		if !inFlow {
			return nil, fmt.Errorf("a plain scalar cannot start with %q; quote it", s[0])
		}
	case '-', '?', ':':
		if len(s) == 1 || s[1] == ' ' {
			return nil, fmt.Errorf("a plain scalar cannot start with %q; quote it", s[:2])
		}
	}
	if strings.Contains(s, ": ") || strings.HasSuffix(s, ":") {
		return nil, fmt.Errorf("plain scalar %q contains ': '; quote it", s)
	}
	if strings.Contains(s, " #") {
		return nil, fmt.Errorf("plain scalar %q contains ' #'", s)
	}
	switch s {
	case "~", "null", "Null", "NULL":
		return nil, nil
	case "true", "True", "TRUE":
		return true, nil
	case "false", "False", "FALSE":
		return false, nil
	}
	if yamlAmbigLit[s] {
		return nil, fmt.Errorf("plain scalar %q means different things in YAML 1.1 and 1.2; quote it", s)
	}
	if yamlBase60.MatchString(s) {
		return nil, fmt.Errorf("plain scalar %q is a base-60 number in YAML 1.1; quote it", s)
	}
	if yamlAmbigNum.MatchString(s) {
		return nil, fmt.Errorf("plain scalar %q is an octal, hex, binary or underscored number in some YAML versions; quote it", s)
	}
	if yamlInt.MatchString(s) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("integer %q: %v", s, err)
		}
		return n, nil
	}
	if yamlFloat.MatchString(s) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("number %q out of range", s)
		}
		return f, nil
	}
	return s, nil
}

func unescapeDouble(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			return "", fmt.Errorf("dangling backslash")
		}
		switch s[i] {
		case '"', '\\', '/':
			b.WriteByte(s[i])
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'u':
			if i+4 >= len(s) {
				return "", fmt.Errorf("short \\u escape")
			}
			r, err := strconv.ParseUint(s[i+1:i+5], 16, 32)
			if err != nil {
				return "", fmt.Errorf("bad \\u escape")
			}
			b.WriteRune(rune(r))
			i += 4
		default:
			return "", fmt.Errorf("unsupported escape \\%c", s[i])
		}
	}
	return b.String(), nil
}

func TestYAMLSubsetParsesWhatTheDeploymentFilesUse(t *testing.T) {
	src := `# comment
name: demo   # trailing comment
services:
  a:
    image: "postgres:17-alpine"
    command: ["--listen", ":8000", 'it''s']
    ports:
      - "8080:8080"
    environment:
      URL: postgres://u:p@h:5432/db?sslmode=disable
      EMPTY:
      HASH: "a # not a comment"
    healthcheck:
      test: [CMD, /bin/probe]
      retries: 3
      ratio: 0.5
      disable: false
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: 1
              capabilities: [gpu]
    networks:
      default:
        aliases: [vllm]
    list:
    - x
    - {k: v, num: 2}
    -
      nested: true
volumes:
  data:
`
	got, err := parseYAML(src)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"name": "demo",
		"services": map[string]any{"a": map[string]any{
			"image":   "postgres:17-alpine",
			"command": []any{"--listen", ":8000", "it's"},
			"ports":   []any{"8080:8080"},
			"environment": map[string]any{
				"URL": "postgres://u:p@h:5432/db?sslmode=disable", "EMPTY": nil, "HASH": "a # not a comment",
			},
			"healthcheck": map[string]any{"test": []any{"CMD", "/bin/probe"}, "retries": int64(3), "ratio": 0.5, "disable": false},
			"deploy": map[string]any{"resources": map[string]any{"reservations": map[string]any{"devices": []any{
				map[string]any{"driver": "nvidia", "count": int64(1), "capabilities": []any{"gpu"}},
			}}}},
			"networks": map[string]any{"default": map[string]any{"aliases": []any{"vllm"}}},
			"list":     []any{"x", map[string]any{"k": "v", "num": int64(2)}, map[string]any{"nested": true}},
		}},
		"volumes": map[string]any{"data": nil},
	}
	if !jsonEqualValues(got, want) {
		t.Fatalf("parsed:\n%#v\nwant:\n%#v", got, want)
	}
}

func TestYAMLSubsetFailsLoudlyOnWhatItDoesNotSupport(t *testing.T) {
	for name, src := range map[string]string{
		"tab indent":      "a:\n\tb: 1\n",
		"anchor":          "a: &x 1\n",
		"alias":           "a: *x\n",
		"tag":             "a: !!str 1\n",
		"merge key":       "a:\n  <<: {b: 1}\n",
		"block scalar":    "a: |\n  text\n",
		"folded scalar":   "a: >\n  text\n",
		"multi-line":      "a: one\n  two\n",
		"duplicate key":   "a: 1\na: 2\n",
		"document marker": "---\na: 1\n",
		"yes":             "a: yes\n",
		"off":             "a: off\n",
		"base 60":         "ports:\n  - 22:22\n",
		"octal":           "mode: 0700\n",
		"hex":             "n: 0x1F\n",
		"nan":             "n: .nan\n",
		"colon in plain":  "a: b: c\n",
		"unterminated":    "a: \"open\n",
		"bad indent":      "a:\n    b: 1\n  c: 2\n",
		"complex key":     "? a\n: b\n",
		"trailing comma":  "a: [1, 2,]\n",
		"unknown escape":  "a: \"\\q\"\n",
		"seq in map":      "a: 1\n- b\n",
		"value and block": "a: 1\n  b: 2\n",
	} {
		if v, err := parseYAML(src); err == nil {
			t.Errorf("%s: parsed %q as %#v, want an error", name, src, v)
		}
	}
}
