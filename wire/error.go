package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// Error types of the OpenAI envelope (docs/wire.md §2.4).
const (
	ErrInvalidRequest = "invalid_request_error"
	ErrServer         = "server_error"
	ErrAuthentication = "authentication_error"
	// ErrRateLimit is the type of a 429. OpenAI's own 429s say which limit was hit ("requests"
	// or "tokens"); clients branch on the status and on CodeRateLimit, never on this type
	// (docs/errors.md). A gateway only knows that a request was refused, so "requests".
	ErrRateLimit = "requests"
	ErrNotFound  = "not_found_error"
)

// CodeRateLimit is the code of every 429: OpenAI's "rate_limit_exceeded", which is also a value
// of the Responses API's ResponseError.code (docs/errors.md).
const CodeRateLimit = "rate_limit_exceeded"

// APIError is an error that carries its HTTP status and OpenAI envelope fields. Any package may
// return one (wrapped or not); the server finds it with errors.As and writes
// {"error":{"message","type","param","code"}} with Status. Message must be safe to show a client:
// no SQL, URLs, file paths, keys or user content.
type APIError struct {
	Status  int
	Type    string
	Code    string // empty encodes as null
	Param   string // empty encodes as null
	Message string
	// RetryAfter, when set, is sent as the Retry-After header next to the envelope (it is not
	// part of the body): delta-seconds or an HTTP-date, already checked by whoever set it. The
	// OpenAI SDKs wait that long before retrying a 429 or 5xx (docs/errors.md).
	RetryAfter string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s (code=%s param=%s): %s", e.Status, e.Type, e.Code, e.Param, e.Message)
}

// Invalid is a 400 invalid_request_error.
func Invalid(param, code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: ErrInvalidRequest, Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

// NotFound is a 404 invalid_request_error, the answer to an unknown (or foreign) id.
func NotFound(param, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: ErrInvalidRequest, Param: param, Code: "not_found",
		Message: fmt.Sprintf(format, args...)}
}

// Conflict is a 409 invalid_request_error: the request clashes with work in progress.
func Conflict(param, code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusConflict, Type: ErrInvalidRequest, Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

// ErrorBody is the object inside the envelope.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Body returns the envelope's inner object.
func (e *APIError) Body() ErrorBody {
	b := ErrorBody{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		p := e.Param
		b.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		b.Code = &c
	}
	return b
}

// Envelope returns the JSON envelope {"error":{...}}.
func (e *APIError) Envelope() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Messages quote 'Authorization: Bearer <key>' and code; \u003ckey\u003e helps no reader.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Error ErrorBody `json:"error"`
	}{e.Body()})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
