package wire

import (
	"fmt"
	"log/slog"
)

// Event is one server-sent event of a Responses stream: its type (the SSE "event" field, equal to
// the JSON "type" member) and its JSON data. Upstream decoding produces Events; the accumulator
// consumes them and produces the normalised client Events.
type Event struct {
	Type EventType
	Data []byte
}

// String prints a safe summary: type and size, never the data.
func (e Event) String() string { return fmt.Sprintf("event{type=%s bytes=%d}", e.Type, len(e.Data)) }

// GoString is String, so %#v cannot leak content either.
func (e Event) GoString() string { return e.String() }

// LogValue is String, so slog's handlers (JSON included) cannot leak content either.
func (e Event) LogValue() slog.Value { return slog.StringValue(e.String()) }

// AppendSSE appends e framed as one SSE event ("event: T\ndata: JSON\n\n"). Data must be one line
// of JSON (encoding/json never emits raw newlines).
func (e Event) AppendSSE(dst []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, string(e.Type)...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, e.Data...)
	return append(dst, "\n\n"...)
}

// DoneFrame is the SSE frame that ends every respgate stream after its terminal event
// (Open Responses requires it; both SDKs tolerate it, docs/wire.md §5.1).
const DoneFrame = "data: [DONE]\n\n"
