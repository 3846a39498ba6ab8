package accumulator

import (
	"fmt"
	"log/slog"
)

// Result, Snapshot and Accumulator hold model output (text, reasoning, tool arguments), which must
// never reach logs (docs/design.md §1 invariant 6). Like openai-go's apierror, they print only a safe
// summary, through fmt verbs and slog alike. Format answers every verb, %#v included, so fmt never
// reaches a GoString or the fields.

// String prints status, item count and drops, never content.
func (r *Result) String() string {
	if r == nil {
		return "accumulator.Result(nil)"
	}
	code := ""
	if r.Error != nil {
		code = r.Error.Code
	}
	return fmt.Sprintf("accumulator.Result{status=%s items=%d dropped=%d error=%s}", r.Status, len(r.Output), r.Dropped, code)
}

// String prints status and item count, never content.
func (s *Snapshot) String() string {
	if s == nil {
		return "accumulator.Snapshot(nil)"
	}
	return fmt.Sprintf("accumulator.Snapshot{id=%s status=%s items=%d}", s.ResponseID, s.Status, len(s.Output))
}

// String prints the accumulator's progress, never content.
func (a *Accumulator) String() string {
	if a == nil {
		return "accumulator.Accumulator(nil)"
	}
	return fmt.Sprintf("accumulator.Accumulator{id=%s items=%d seq=%d done=%v dropped=%d}",
		a.opts.ResponseID, len(a.items), a.seq, a.done, a.dropped)
}

// Format prints String for every verb.
func (r *Result) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(r.String())) }

// Format prints String for every verb.
func (s *Snapshot) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// Format prints String for every verb.
func (a *Accumulator) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(a.String())) }

// LogValue is the same summary for slog.
func (r *Result) LogValue() slog.Value { return slog.StringValue(r.String()) }

// LogValue is the same summary for slog.
func (s *Snapshot) LogValue() slog.Value { return slog.StringValue(s.String()) }

// LogValue is the same summary for slog.
func (a *Accumulator) LogValue() slog.Value { return slog.StringValue(a.String()) }
