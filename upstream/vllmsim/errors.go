package vllmsim

import (
	"fmt"
	"net/http"
	"strconv"
)

// vllmError is one of vLLM's error answers: {"error":{"message","type","param","code"}} where code is
// the HTTP status as an integer (ErrorInfo in vllm/entrypoints/openai/engine/protocol.py; docs/wire.md §6.1).
type vllmError struct {
	status  int
	typ     string
	message string
	param   string // "" encodes as null
}

func (e *vllmError) Error() string {
	return fmt.Sprintf("vllmsim: %d %s: %s", e.status, e.typ, e.message)
}

// badRequest is what OpenAIServing.create_error_response makes of a ValueError: 400 "BadRequestError",
// param null (vllm/entrypoints/openai/engine/serving.py).
func badRequest(format string, args ...any) *vllmError {
	return &vllmError{status: http.StatusBadRequest, typ: "BadRequestError", message: fmt.Sprintf(format, args...)}
}

// validationError is vLLM's answer to a pydantic RequestValidationError: 400, type "Bad Request",
// param the cleaned error location (validation_exception_handler in serve/utils/server_utils.py).
func validationError(param, errType, msg string) *vllmError {
	return &vllmError{
		status: http.StatusBadRequest,
		typ:    "Bad Request",
		param:  param,
		message: fmt.Sprintf("1 validation error:\n  {'type': '%s', 'loc': ('body', '%s'), 'msg': '%s'}",
			errType, param[len("body."):], msg),
	}
}

// httpError is vLLM's answer to an HTTPException (unknown route, wrong method): the type is the
// status phrase (http_exception_handler in serve/utils/server_utils.py).
func httpError(status int) *vllmError {
	return &vllmError{status: status, typ: http.StatusText(status), message: http.StatusText(status)}
}

// faultError is the answer to status=S: the type vLLM uses for that status where it has one.
func faultError(status int) *vllmError {
	typ := http.StatusText(status)
	switch status {
	case http.StatusBadRequest:
		typ = "BadRequestError"
	case http.StatusNotFound:
		typ = "NotFoundError"
	case http.StatusInternalServerError:
		typ = "InternalServerError"
	case http.StatusNotImplemented:
		typ = "NotImplementedError"
	}
	return &vllmError{status: status, typ: typ, message: "Simulated error (status " + strconv.Itoa(status) + ")."}
}

func (e *vllmError) appendJSON(b []byte) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendStr(b, e.message)
	b = append(b, `,"type":`...)
	b = appendStr(b, e.typ)
	b = append(b, `,"param":`...)
	if e.param == "" {
		b = append(b, "null"...)
	} else {
		b = appendStr(b, e.param)
	}
	b = append(b, `,"code":`...)
	b = appendInt(b, e.status)
	return append(b, "}}"...)
}

func writeError(w http.ResponseWriter, e *vllmError) {
	body := e.appendJSON(nil)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}
