package server

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// renderResponse appends the client-facing response object: the server-set members, then the
// stored request echo. Every key Open Responses requires is present (CONTRACT §3); the echo
// supplies the request-derived ones.
func renderResponse(dst []byte, r *store.Response, output []wire.Item) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendQuote(dst, r.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, r.CreatedAt.Unix(), 10)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendQuote(dst, r.Status)
	dst = append(dst, `,"completed_at":`...)
	if r.CompletedAt != nil && r.Status == store.StatusCompleted {
		dst = strconv.AppendInt(dst, r.CompletedAt.Unix(), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = appendRaw(append(dst, `,"error":`...), r.Error)
	dst = appendRaw(append(dst, `,"incomplete_details":`...), r.IncompleteDetails)
	dst = append(dst, `,"output":[`...)
	for i, it := range output {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, it.JSON...)
	}
	dst = append(dst, ']')
	dst = appendRaw(append(dst, `,"usage":`...), r.Usage)
	echo := r.Echo
	if len(echo) > 2 { // "{...}": splice its members in
		dst = append(dst, ',')
		dst = append(dst, echo[1:]...)
	} else {
		dst = append(dst, '}')
	}
	return dst
}

func appendRaw(dst []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(dst, "null"...)
	}
	return append(dst, raw...)
}

// errorJSON is the response's error member {"code","message"}.
func errorJSON(code, message string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
	return b
}

func unixPtr(t time.Time) *time.Time { return &t }
