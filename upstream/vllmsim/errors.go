package vllmsim

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/respgate/respgate/wire"
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

// responseNotFound is vLLM's _make_not_found_error (responses/serving.py).
func responseNotFound(id string) *vllmError {
	return &vllmError{status: http.StatusNotFound, typ: "invalid_request_error", param: "response_id",
		message: "Response with id '" + id + "' not found."}
}

// unknownModel is OpenAIServingModels.check_model's answer to a model it does not serve.
func unknownModel(name string) *vllmError {
	return &vllmError{status: http.StatusNotFound, typ: "NotFoundError", param: "model",
		message: "The model `" + name + "` does not exist."}
}

// mediaTypeError is validate_json_request's answer to a body that is not application/json.
func mediaTypeError() *vllmError {
	return &vllmError{status: http.StatusBadRequest, typ: "Bad Request",
		message: "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"}
}

// jsonInvalid is pydantic's answer to a body that is not JSON.
func jsonInvalid() *vllmError {
	return &vllmError{status: http.StatusBadRequest, typ: "Bad Request", param: "body",
		message: "1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error'}"}
}

// toolChoiceHarmony is what _make_request_with_harmony's NotImplementedError becomes:
// create_error_response maps it to 501 "NotImplementedError".
func toolChoiceHarmony() *vllmError {
	return &vllmError{status: http.StatusNotImplemented, typ: "NotImplementedError",
		message: "Only 'auto' or 'none' tool_choice is supported in response API with Harmony"}
}

// contextLength is vLLM's refusal of a prompt of n tokens that does not fit max: the chat
// renderer's VLLMValidationError (parameter input_tokens) on the parser path, which checks
// n > max before anything else, and _validate_generator_input of the responses path (harmony,
// and a parser-path prompt of exactly max tokens), which checks n >= max.
func contextLength(d Dialect, n, max int) *vllmError {
	if d == ReasoningParser && n > max {
		return &vllmError{status: http.StatusBadRequest, typ: "BadRequestError", param: "input_tokens",
			message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
				"Please reduce the length of the input messages.", max, n)}
	}
	return &vllmError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "input",
		message: fmt.Sprintf("The engine prompt length %d exceeds the max_model_len %d. Please reduce prompt.", n, max)}
}

// generationError is vLLM's GenerationError, raised when the engine finishes a request with
// finish_reason "error" (_raise_if_error in engine/serving.py): a non-streamed request gets it as a
// 500; a stream gets it in the middle (errorFrame).
func generationError() *vllmError {
	return &vllmError{status: http.StatusInternalServerError, typ: "InternalServerError", message: "Internal server error"}
}

// errorFrame is the frame vLLM's streaming routes write for a GenerationError after the stream
// has started: data: {"error":{...}} with no event name (create_streaming_error_response). On
// the Responses route vLLM then fails to validate it as an event and drops the connection (PR
// 40418); the simulator writes the frame, then drops the connection, so a client sees both.
func errorFrame() []byte {
	b := append([]byte(nil), "data: "...)
	return append(generationError().appendJSON(b), "\n\n"...)
}

// knownErrors are the error answers of vLLM the simulator reproduces, by the name a fault's
// error=NAME chooses (with fixed example values where vLLM's text names the request's own); the
// natural triggers build the same answers with the request's values.
var knownErrors = []struct {
	name string
	make func(d Dialect, maxModelLen int) *vllmError
}{
	{"json_invalid", func(Dialect, int) *vllmError { return jsonInvalid() }},
	{"media_type", func(Dialect, int) *vllmError { return mediaTypeError() }},
	{"input_missing", func(Dialect, int) *vllmError { return validationError("body.input", "missing", "Field required") }},
	{"input_list", func(Dialect, int) *vllmError {
		return validationError("body.input", "list_type", "Input should be a valid list")
	}},
	{"input_item", func(Dialect, int) *vllmError {
		return validationError("body.input", "model_type", "Input should be a valid input item")
	}},
	{"field_type", func(Dialect, int) *vllmError {
		return validationError("body.temperature", "type_error", "Input should be a valid float64")
	}},
	{"no_call", func(Dialect, int) *vllmError { return badRequest("No call message found for %s", "call_1") }},
	{"unknown_input_type", func(Dialect, int) *vllmError { return badRequest("Unknown input type: %s", "web_search_call") }},
	{"encrypted_content", func(Dialect, int) *vllmError { return badRequest("Encrypted content is not supported.") }},
	{"max_tokens", func(Dialect, int) *vllmError { return badRequest("max_tokens must be at least 1, got %d.", 0) }},
	{"unknown_model", func(Dialect, int) *vllmError { return unknownModel("gpt-nope") }},
	{"response_not_found", func(Dialect, int) *vllmError { return responseNotFound("resp_nope") }},
	{"tool_choice", func(Dialect, int) *vllmError { return toolChoiceHarmony() }},
	{"context_length", func(d Dialect, max int) *vllmError { return contextLength(d, max+1, max) }},
	{"generation", func(Dialect, int) *vllmError { return generationError() }},
	{"route_not_found", func(Dialect, int) *vllmError { return httpError(http.StatusNotFound) }},
	{"method_not_allowed", func(Dialect, int) *vllmError { return httpError(http.StatusMethodNotAllowed) }},
	{"body_too_large", func(Dialect, int) *vllmError { return httpError(http.StatusRequestEntityTooLarge) }},
}

// ErrorNames lists the names of vLLM's error answers the simulator knows, for the fault error=NAME.
func ErrorNames() []string {
	names := make([]string, len(knownErrors))
	for i, e := range knownErrors {
		names[i] = e.name
	}
	return names
}

func knownError(name string) (func(Dialect, int) *vllmError, bool) {
	for _, e := range knownErrors {
		if e.name == name {
			return e.make, true
		}
	}
	return nil, false
}

func (e *vllmError) appendJSON(b []byte) []byte {
	b = append(b, `{"error":{"message":`...)
	b = wire.AppendString(b, e.message)
	b = append(b, `,"type":`...)
	b = wire.AppendString(b, e.typ)
	b = append(b, `,"param":`...)
	if e.param == "" {
		b = append(b, "null"...)
	} else {
		b = wire.AppendString(b, e.param)
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
