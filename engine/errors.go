package engine

import (
	"errors"
	"net/http"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// KnownAPIError is the API error err carries (a wire.APIError, or an upstream.Error's), or nil.
func KnownAPIError(err error) *wire.APIError {
	var ae *wire.APIError
	if errors.As(err, &ae) {
		return ae
	}
	var ue *upstream.Error
	if errors.As(err, &ue) {
		return ue.APIError()
	}
	return nil
}

// Unexpected is the API error of an err that carries none (KnownAPIError is nil): 503
// store_unavailable when the store's connection failed (upstream failures carry their own), else
// a 500 whose cause is logged with attrs and never sent. Every error writer uses it: the HTTP
// handler, a stream's error event, a WebSocket error event.
func (e *Engine) Unexpected(err error, attrs ...any) *wire.APIError {
	if store.Unreachable(err) {
		e.log.Warn("store unreachable", append(attrs, "error", err)...)
		return ErrStoreUnavailable
	}
	e.log.Error("internal error", append(attrs, "error", err)...)
	return ErrInternal
}

// ErrStoreUnavailable answers readiness while the store does not answer, and any request whose
// store connection failed (store.Unreachable); the 503 brings Retry-After: 1.
var ErrStoreUnavailable = &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "store_unavailable",
	Message: "The store is not reachable; retry the request."}

// ErrInternal never says more than this; the log has the cause.
var ErrInternal = &wire.APIError{Status: http.StatusInternalServerError, Type: wire.ErrServer, Message: "The gateway had an internal error."}

// failureObject is the error object of a response that failed for cause (response.failed and
// the stored record): the code and message of the envelope a non-streamed call gets for the same
// failure, so a client sees one error whether it streamed or not (docs/errors.md, "Streamed
// turns"). A code-less envelope (a vLLM 4xx with code null) gives its type, as the object's code
// is required. nil when cause is not an upstream failure (nor a gateway APIError).
func failureObject(cause error) *wire.ErrorObject {
	var (
		ae *wire.APIError
		ue *upstream.Error
	)
	switch {
	case errors.As(cause, &ue):
		ae = ue.APIError()
	case errors.As(cause, &ae):
	case errors.Is(cause, accumulator.ErrLimit):
		// Over the gateway's output limits: as a non-streamed answer over the size limit.
		ae = (&upstream.Error{Kind: upstream.KindEventTooLarge}).APIError()
	case errors.Is(cause, accumulator.ErrMalformed), errors.Is(cause, accumulator.ErrIndex):
		// An event the gateway cannot read: as a non-streamed 200 whose body it cannot read.
		ae = (&upstream.Error{Kind: upstream.KindBadBody, Status: http.StatusOK}).APIError()
	default:
		return nil
	}
	code := ae.Code
	if code == "" {
		code = ae.Type
	}
	return &wire.ErrorObject{Code: code, Message: ae.Message}
}
