package server

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/wire"
)

// errorHandler is the only writer of error responses: every error becomes the OpenAI envelope
// {"error":{"message","type","param","code"}} with its status (docs/style.md: one HTTPErrorHandler). Echo's
// own default handler never answers. Internal error text never reaches the client; it is logged
// next to the request id.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return // a stream already started reports failures in-band (response.failed)
	}
	ae := s.toAPIError(err, c)
	switch {
	case ae.RetryAfter != "":
		// The upstream's own Retry-After (upstream.Error.APIError keeps it on 429 and 502-504,
		// checked): the OpenAI SDKs wait that long before they retry (docs/errors.md).
		c.Response().Header().Set("Retry-After", ae.RetryAfter)
	case ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusTooManyRequests:
		c.Response().Header().Set("Retry-After", "1")
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(ae.Status)
		return
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().WriteHeader(ae.Status)
	_, _ = c.Response().Write(ae.Envelope())
}

func (s *Server) toAPIError(err error, c echo.Context) *wire.APIError {
	if ae := engine.KnownAPIError(err); ae != nil {
		return ae
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			path := c.Request().URL.Path
			msg := "Unknown route " + c.Request().Method + " " + path + "."
			if path != "/v1" && !strings.HasPrefix(path, "/v1/") {
				// A base URL without /v1 is the commonest first mistake with an OpenAI SDK.
				msg += " The API is served under /v1 (base URL http://HOST:PORT/v1): did you mean /v1" + path + "?"
			}
			return &wire.APIError{Status: 404, Type: wire.ErrInvalidRequest, Code: "not_found", Message: msg}
		case http.StatusMethodNotAllowed:
			return &wire.APIError{Status: 405, Type: wire.ErrInvalidRequest, Code: "method_not_allowed",
				Message: "Method " + c.Request().Method + " is not allowed on " + c.Request().URL.Path + "."}
		case http.StatusRequestEntityTooLarge:
			return &wire.APIError{Status: 413, Type: wire.ErrInvalidRequest, Code: "request_too_large",
				Message: "The request body is larger than this gateway accepts."}
		case http.StatusUnauthorized:
			return &wire.APIError{Status: 401, Type: wire.ErrInvalidRequest, Code: "invalid_api_key",
				Message: "Incorrect API key provided."}
		}
		msg := http.StatusText(he.Code)
		if he.Code >= 500 {
			return &wire.APIError{Status: he.Code, Type: wire.ErrServer, Message: msg}
		}
		return &wire.APIError{Status: he.Code, Type: wire.ErrInvalidRequest, Message: msg}
	}
	if errors.Is(err, context.Canceled) {
		return &wire.APIError{Status: 499, Type: wire.ErrInvalidRequest, Message: "client closed request"}
	}
	return s.engine.Unexpected(err, "request_id", requestID(c))
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}
