package vllmsim

import (
	"errors"
	"fmt"
	"math/bits"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Quirks is a set of vLLM wire quirks (docs/wire.md §6.5). The package doc describes each one.
type Quirks uint32

// The quirks the simulator can reproduce. Each one is on unless switched off.
const (
	QuirkReasoningPart Quirks = 1 << iota // response.reasoning_part.* instead of content_part.*
	QuirkContentIndex                     // harmony: content_index not reset between items
	QuirkIDs                              // stream ids differ from the final ids
	QuirkAdded                            // harmony: missing output_item.added/content_part.added
	QuirkStatus                           // final output: status null / always "completed"
	QuirkStray                            // stray item_id/output_index/sequence_number and summary fields
	QuirkNulls                            // content:null, encrypted_content:null, logprobs:null
	QuirkTerminal                         // response.completed even when incomplete
	QuirkTruncate                         // harmony: no done events for the cut item
	QuirkArgsDone                         // parser: arguments.done only after a non-empty delta
	QuirkFields                           // vLLM's response field set and usage shape

	// AllQuirks is every quirk: what vLLM does.
	AllQuirks = QuirkReasoningPart | QuirkContentIndex | QuirkIDs | QuirkAdded | QuirkStatus |
		QuirkStray | QuirkNulls | QuirkTerminal | QuirkTruncate | QuirkArgsDone | QuirkFields
)

var quirkNames = []struct {
	q    Quirks
	name string
}{
	{QuirkReasoningPart, "reasoning_part"},
	{QuirkContentIndex, "content_index"},
	{QuirkIDs, "ids"},
	{QuirkAdded, "added"},
	{QuirkStatus, "status"},
	{QuirkStray, "stray"},
	{QuirkNulls, "nulls"},
	{QuirkTerminal, "terminal"},
	{QuirkTruncate, "truncate"},
	{QuirkArgsDone, "args_done"},
	{QuirkFields, "fields"},
}

// String lists the quirks in q by their names, comma-separated ("none" for the empty set).
func (q Quirks) String() string {
	if q&AllQuirks == 0 {
		return "none"
	}
	names := make([]string, 0, bits.OnesCount32(uint32(q)))
	for _, n := range quirkNames {
		if q&n.q != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// apply applies a quirks=LIST value to q: "name" adds, "-name" removes, "none" clears, "all" sets.
func (q Quirks) apply(list string) (Quirks, error) {
	for _, word := range strings.Split(list, ",") {
		word = strings.TrimSpace(word)
		switch word {
		case "":
			continue
		case "none":
			q = 0
			continue
		case "all":
			q = AllQuirks
			continue
		}
		remove := strings.HasPrefix(word, "-")
		name := strings.TrimPrefix(strings.TrimPrefix(word, "-"), "+")
		found := false
		for _, n := range quirkNames {
			if n.name == name {
				found = true
				if remove {
					q &^= n.q
				} else {
					q |= n.q
				}
			}
		}
		if !found {
			return q, fmt.Errorf("unknown quirk %q", name)
		}
	}
	return q, nil
}

// fault is the effective fault configuration of one request. Negative positions mean "off".
type fault struct {
	delay           time.Duration
	stall           time.Duration
	stallAfter      int
	cutAfter        int
	cutInside       int
	errorAfter      int    // -1: off
	errorName       string // "": off; else a name of knownErrors
	status          int
	retryAfter      string // "": no Retry-After header on a status= answer
	maxOutputTokens int    // 0: off
	malformedAfter  int
	huge            int // 0: off
	tokens          int // 0: off
	inputTokens     int // 0: off; else the usage.input_tokens to report
	noReasoning     bool
	noArgs          bool
	quirks          Quirks
}

func newFault(quirks Quirks) fault {
	return fault{cutAfter: -1, cutInside: -1, errorAfter: -1, malformedAfter: -1, quirks: quirks}
}

// ValidateFault reports whether spec is a valid fault specification (the syntax in the package doc,
// with or without a leading "?"), as accepted in Options.Fault, a model name or X-Sim-Fault.
func ValidateFault(spec string) error {
	f := newFault(AllQuirks)
	return f.apply(spec)
}

// apply parses spec and sets the fields it names, keeping the others.
func (f *fault) apply(spec string) error {
	spec = strings.TrimPrefix(strings.TrimSpace(spec), "?")
	if spec == "" {
		return nil
	}
	values, err := url.ParseQuery(spec)
	if err != nil {
		return fmt.Errorf("vllmsim: fault %q: %w", spec, err)
	}
	// url.Values is a map: apply keys in a fixed order so that errors are deterministic.
	for _, key := range faultKeys {
		vs, ok := values[key.name]
		if !ok {
			continue
		}
		v := vs[len(vs)-1]
		if err := key.set(f, v); err != nil {
			return fmt.Errorf("vllmsim: fault %s=%q: %w", key.name, v, err)
		}
		delete(values, key.name)
	}
	for name := range values {
		return fmt.Errorf("vllmsim: unknown fault parameter %q", name)
	}
	return nil
}

var faultKeys = []struct {
	name string
	set  func(f *fault, v string) error
}{
	{"delay_ms", func(f *fault, v string) error {
		n, err := atLeast(v, 0)
		f.delay = time.Duration(n) * time.Millisecond
		return err
	}},
	{"stall", func(f *fault, v string) error {
		d, err := parseDuration(v)
		f.stall = d
		return err
	}},
	{"stall_after", intKey(0, func(f *fault) *int { return &f.stallAfter })},
	{"cut_after", intKey(0, func(f *fault) *int { return &f.cutAfter })},
	{"cut_inside", intKey(0, func(f *fault) *int { return &f.cutInside })},
	{"error_after", intKey(0, func(f *fault) *int { return &f.errorAfter })},
	{"error", func(f *fault, v string) error {
		if _, ok := knownError(v); !ok {
			return errors.New("want one of " + strings.Join(ErrorNames(), ", "))
		}
		f.errorName = v
		return nil
	}},
	{"status", func(f *fault, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 || n > 599 {
			return errors.New("want an HTTP status 100..599")
		}
		f.status = n
		return nil
	}},
	{"retry_after", func(f *fault, v string) error {
		// Any printable ASCII, so a test can also send a value the gateway must drop.
		if v == "" || len(v) > 64 || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			return errors.New("want 1..64 printable ASCII characters")
		}
		f.retryAfter = v
		return nil
	}},
	{"max_output_tokens", intKey(1, func(f *fault) *int { return &f.maxOutputTokens })},
	{"malformed", intKey(0, func(f *fault) *int { return &f.malformedAfter })},
	{"huge", intKey(1, func(f *fault) *int { return &f.huge })},
	{"tokens", intKey(1, func(f *fault) *int { return &f.tokens })},
	{"input_tokens", intKey(1, func(f *fault) *int { return &f.inputTokens })},
	{"reasoning", func(f *fault, v string) error {
		b, err := strconv.ParseBool(v)
		f.noReasoning = !b
		return err
	}},
	{"noargs", func(f *fault, v string) error {
		b, err := strconv.ParseBool(v)
		f.noArgs = b
		return err
	}},
	{"quirks", func(f *fault, v string) error {
		q, err := f.quirks.apply(v)
		f.quirks = q
		return err
	}},
}

// atLeast parses v as an integer no smaller than lo.
func atLeast(v string, lo int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo {
		return 0, fmt.Errorf("want an integer >= %d", lo)
	}
	return n, nil
}

// intKey sets the integer field a fault key names, no smaller than lo.
func intKey(lo int, field func(*fault) *int) func(*fault, string) error {
	return func(f *fault, v string) error {
		n, err := atLeast(v, lo)
		*field(f) = n
		return err
	}
}

func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n < 0 {
			return 0, errors.New("want a duration >= 0")
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, errors.New("want a duration such as 2s or 150ms")
	}
	return d, nil
}

// splitModel splits "base?query" into the served model name and its fault query.
func splitModel(model string) (base, query string) {
	base, query, _ = strings.Cut(model, "?")
	return base, query
}
