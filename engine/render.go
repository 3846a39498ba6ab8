package engine

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// RenderResponse appends the client-facing response object: the server-set members, then the
// stored request echo. Strings are JSON-quoted and stored JSON has invalid UTF-8 replaced
// (wire.AppendString, wire.AppendRaw), so the output is valid JSON whatever the store holds. Every key Open Responses requires is present (docs/wire.md §3); the echo
// supplies the request-derived ones.
func RenderResponse(dst []byte, r *store.Response, output []wire.Item) []byte {
	dst = append(dst, `{"id":`...)
	dst = wire.AppendString(dst, r.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, r.CreatedAt.Unix(), 10)
	dst = append(dst, `,"status":`...)
	dst = wire.AppendString(dst, string(r.Status))
	dst = append(dst, `,"completed_at":`...)
	if r.CompletedAt != nil && r.Status == wire.StatusCompleted {
		dst = strconv.AppendInt(dst, r.CompletedAt.Unix(), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = wire.AppendRaw(append(dst, `,"error":`...), r.Error)
	dst = wire.AppendRaw(append(dst, `,"incomplete_details":`...), r.IncompleteDetails)
	dst = append(dst, `,"output":[`...)
	for i, it := range output {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = wire.AppendRaw(dst, it.JSON)
	}
	dst = append(dst, ']')
	dst = wire.AppendRaw(append(dst, `,"usage":`...), r.Usage)
	echo := r.Echo
	if len(echo) > 2 { // "{...}": splice its members in
		dst = append(dst, ',')
		dst = wire.AppendRaw(dst, echo[1:])
	} else {
		dst = append(dst, '}')
	}
	return dst
}

// ValidItems returns items with each one's JSON made valid UTF-8 (wire.ValidUTF8), for writers
// that pass parts of stored items through encoding/json, which keeps a json.RawMessage's invalid
// UTF-8 as it is. It copies nothing when every item is valid already.
func ValidItems(items []wire.Item) []wire.Item {
	var out []wire.Item
	for i, it := range items {
		if utf8.Valid(it.JSON) {
			continue
		}
		if out == nil {
			out = slices.Clone(items)
		}
		out[i].JSON = wire.ValidUTF8(it.JSON)
	}
	if out == nil {
		return items
	}
	return out
}

// errorJSON is the response's error member {"code","message"}.
func errorJSON(code, message string) json.RawMessage {
	b, _ := json.Marshal(wire.ErrorObject{Code: code, Message: message})
	return b
}

func unixPtr(t time.Time) *time.Time { return &t }
