package engine

import (
	"fmt"
	"path"
	"strings"
)

// byModel is one entry of a per-model setting (--context-window, --reasoning-context): a
// path.Match pattern over model names and the value for the models it matches.
type byModel[T any] struct {
	pattern string
	value   T
}

// parseByModel reads a per-model setting: comma-separated "pattern=value" pairs, a bare value
// standing for "*=value". parse reads (and checks) one value; what names the setting in errors.
func parseByModel[T any](what, spec string, parse func(string) (T, error)) ([]byModel[T], error) {
	var out []byModel[T]
	for _, ent := range strings.Split(spec, ",") {
		ent = strings.TrimSpace(ent)
		if ent == "" {
			continue
		}
		pat, val, ok := strings.Cut(ent, "=")
		if !ok {
			pat, val = "*", ent
		}
		pat = strings.TrimSpace(pat)
		v, err := parse(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, ent, err)
		}
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("%s %q: bad model pattern: %w", what, ent, err)
		}
		out = append(out, byModel[T]{pat, v})
	}
	return out, nil
}

// lookupByModel is the value of the first entry whose pattern matches model. "*" (what a bare
// value stands for) matches every model: path.Match's * stops at a slash, and most model names
// have one (openai/gpt-oss-20b).
func lookupByModel[T any](entries []byModel[T], model string) (T, bool) {
	for _, e := range entries {
		if ok, _ := path.Match(e.pattern, model); ok || e.pattern == "*" {
			return e.value, true
		}
	}
	var zero T
	return zero, false
}
