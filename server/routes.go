package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/wire"
)

const tenantKey = "respgate.tenant"

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.requestIDMiddleware, s.logMiddleware, s.recoverMiddleware, s.headerLimitMiddleware, s.bodyLimitMiddleware(s.budget))

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.readyz)
	// /metrics holds no tenant data but still needs a key when an allowlist is configured.
	e.GET("/metrics", echo.WrapHandler(s.tel.Handler), s.authMiddleware)

	v1 := e.Group("/v1", s.authMiddleware, s.pathIDMiddleware)
	v1.POST("/responses", s.createResponse)
	v1.POST("/responses/compact", s.compactResponse)
	v1.GET("/responses", s.responsesSocket) // the WebSocket mode (ws.go)
	v1.GET("/responses/:id", s.getResponse)
	v1.DELETE("/responses/:id", s.deleteResponse)
	v1.GET("/responses/:id/input_items", s.listInputItems)
	v1.POST("/responses/:id/cancel", s.cancelResponse)
	v1.GET("/models", s.listModels)
	v1.GET("/models/*", s.getModel) // model ids hold slashes (openai/gpt-oss-120b)
	v1.POST("/chat/completions", s.createChatCompletion)

	cv := &conversations{store: s.store, engine: s.engine, maxJSONDepth: s.cfg.MaxJSONDepth}
	v1.POST("/conversations", cv.createConversation)
	v1.GET("/conversations/:id", cv.getConversation)
	v1.POST("/conversations/:id", cv.updateConversation)
	v1.DELETE("/conversations/:id", cv.deleteConversation)
	v1.GET("/conversations/:id/items", cv.listConversationItems)
	v1.POST("/conversations/:id/items", cv.addConversationItems)
	v1.GET("/conversations/:id/items/:item_id", cv.getConversationItem)
	v1.DELETE("/conversations/:id/items/:item_id", cv.deleteConversationItem)

	// Every other path is a JSON 404 through the error handler (Echo's default never answers),
	// or a 405 with Allow when the path is a route's with another method (docs/errors.md).
	// The group has its own not-found route (Echo adds one with its middleware), so both are set.
	notFound := func(c echo.Context) error {
		if allow := allowedMethods(e, c.Request().URL.Path); len(allow) > 0 {
			c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
			return echo.ErrMethodNotAllowed
		}
		return echo.ErrNotFound
	}
	e.RouteNotFound("/*", notFound)
	v1.RouteNotFound("/*", notFound)
	return e
}

// allowedMethods lists the methods of the routes whose pattern matches path (":name" matches one
// non-empty segment), in registration order; none when no route has this path.
func allowedMethods(e *echo.Echo, path string) []string {
	var out []string
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound || slices.Contains(out, r.Method) || !matchRoute(r.Path, path) {
			continue
		}
		out = append(out, r.Method)
	}
	return out
}

func matchRoute(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i, p := range ps {
		if strings.HasPrefix(p, ":") && xs[i] != "" {
			continue
		}
		if p != xs[i] {
			return false
		}
	}
	return true
}

// Routes lists the registered method+path pairs (tests enumerate them).
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.echo.Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

func (s *Server) readyz(c echo.Context) error {
	if err := s.store.Ping(c.Request().Context()); err != nil {
		s.log.Warn("readiness: store unreachable", "error", err)
		return engine.ErrStoreUnavailable
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// TenantOf is the tenant a bearer key maps to (tests and the fixture use it to read the store
// directly). It is tenantOf, exported.
func (s *Server) TenantOf(key string) string { return s.tenantOf(key) }

// tenantOf is the tenant fingerprint of a bearer key: HMAC-SHA256 under the server secret, so raw
// keys are never stored and a leaked database does not reveal them (docs/design.md §6).
func (s *Server) tenantOf(key string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil))
}

// authMiddleware turns Authorization: Bearer <key> into the tenant. With an allowlist, other keys
// (or none) are a 401; keys are compared by their HMAC in constant time. Without one, every key is
// its own tenant and a missing key is the shared anonymous tenant.
func (s *Server) authMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if len(c.Request().Header.Values(echo.HeaderAuthorization)) > 1 {
			// Which key would be meant is ambiguous (net/http's Get takes the first; a proxy may
			// have added one): refused, whatever the keys are (issue 38 item 13).
			return &wire.APIError{Status: http.StatusUnauthorized, Type: wire.ErrInvalidRequest, Code: "invalid_api_key",
				Message: "The request has more than one Authorization header; send exactly one: 'Authorization: Bearer <key>'."}
		}
		h := c.Request().Header.Get(echo.HeaderAuthorization)
		key, ok := "", true
		if h != "" {
			if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
				key = strings.TrimSpace(h[7:])
			} else {
				ok = false
			}
		}
		tenant := s.tenantOf(key)
		if s.keys != nil {
			found := 0
			for _, k := range s.keys {
				found |= subtle.ConstantTimeCompare([]byte(k), []byte(tenant))
			}
			ok = ok && key != "" && found == 1
		}
		if !ok {
			msg := "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'."
			switch {
			case h == "":
				msg = "No API key provided. Send it as 'Authorization: Bearer <key>'."
			case key == "":
				msg = "The Authorization header is not 'Bearer <key>'."
			}
			return &wire.APIError{Status: http.StatusUnauthorized, Type: wire.ErrInvalidRequest, Code: "invalid_api_key", Message: msg}
		}
		c.Set(tenantKey, tenant)
		return next(c)
	}
}

func tenant(c echo.Context) string { t, _ := c.Get(tenantKey).(string); return t }

func (s *Server) requestIDMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderXRequestID, wire.NewID("req_"))
		return next(c)
	}
}

// logMiddleware opens the request's server span, then logs one line and records the request
// metrics: method, route, status, bytes, duration, request id. Never bodies, headers or query
// values (docs/design.md §1 invariant 6).
func (s *Server) logMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		route := c.Path()
		// No route has a wildcard: one is Echo's not-found route ("/*", or a group's "/v1/*").
		if route == "" || strings.HasSuffix(route, "/*") {
			route = "unmatched"
		}
		ctx, span := s.tel.Tracer.Start(c.Request().Context(), c.Request().Method+" "+route,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", c.Request().Method), attribute.String("http.route", route),
				attribute.String("respgate.request_id", requestID(c))))
		defer span.End()
		var stored *engine.StoredLog
		if c.Request().Method == http.MethodPost {
			stored = &engine.StoredLog{}
			ctx = engine.WithStoredLog(ctx, stored)
		}
		c.SetRequest(c.Request().WithContext(ctx))
		// Write the error here (the one error handler) so the status and size logged below are
		// what the client got.
		if err := next(c); err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		s.tel.Request(ctx, route, status, time.Since(start))
		attrs := append(make([]slog.Attr, 0, 12), // room for the stored response's 5 (accesslog.go)
			slog.String("request_id", requestID(c)),
			slog.String("method", c.Request().Method),
			slog.String("route", c.Path()),
			slog.Int("status", status),
			slog.Int64("bytes_in", c.Request().ContentLength),
			slog.Int64("bytes_out", c.Response().Size),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		)
		if stored != nil {
			attrs = append(attrs, stored.Take()...) // the turn's commit (accesslog.go)
		}
		s.log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
		return nil
	}
}

// recoverMiddleware turns a handler's panic into the 500 envelope and logs the panic value and
// the goroutine's stack, which are what make the bug fixable. It never logs the request body.
// http.ErrAbortHandler is net/http's way to abort a response on purpose and is re-panicked.
func (s *Server) recoverMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler { //nolint:errorlint // r is a recover() value: net/http panics with this sentinel itself, unwrapped
					panic(r)
				}
				s.log.Error("panic in handler", "request_id", requestID(c), "route", c.Path(),
					"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = engine.ErrInternal
			}
		}()
		return next(c)
	}
}

// headerLimitMiddleware answers 431 with the envelope when the request's headers exceed
// MaxHeaderBytes (net/http's own, larger cap answers in plain text, so it is only a backstop).
func (s *Server) headerLimitMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		n := len(c.Request().RequestURI)
		for k, vs := range c.Request().Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n > s.cfg.MaxHeaderBytes {
			return &wire.APIError{Status: http.StatusRequestHeaderFieldsTooLarge, Type: wire.ErrInvalidRequest,
				Code: "headers_too_large", Message: "The request headers are larger than this gateway accepts."}
		}
		return next(c)
	}
}

// bodyLimitMiddleware rejects bodies over MaxBodyBytes with 413, by Content-Length when known and
// while reading otherwise, and bounds the time to read a body (a 1-byte-per-second client gets
// 408 instead of holding a handler). It also charges the body to budget (MaxBodyBytesInFlight)
// until the handler returns: by Content-Length up front, or as a chunked body is read. Past the
// budget the request gets 503 server_overloaded with Retry-After, so many large bodies at once
// cannot take the process's memory without bound.
func (s *Server) bodyLimitMiddleware(budget *semaphore.Weighted) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.ContentLength > s.cfg.MaxBodyBytes {
				return echo.NewHTTPError(http.StatusRequestEntityTooLarge)
			}
			body := http.MaxBytesReader(c.Response(), r.Body, s.cfg.MaxBodyBytes)
			switch {
			case r.ContentLength > 0:
				if !budget.TryAcquire(r.ContentLength) {
					return errOverloaded
				}
				defer budget.Release(r.ContentLength)
			case r.ContentLength < 0: // length unknown (chunked)
				cb := &chargedBody{ReadCloser: body, budget: budget}
				defer func() { budget.Release(cb.charged) }()
				body = cb
			}
			r.Body = &deadlineBody{ReadCloser: body, rc: http.NewResponseController(c.Response()), timeout: s.cfg.BodyReadTimeout}
			return next(c)
		}
	}
}

// deadlineBody sets a read deadline on the connection at the first read of a body and clears it
// at EOF, so the deadline covers reading the body and nothing after it (a stream's lifetime).
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	armed   bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if !b.armed {
		b.armed = true
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, errBodyTimeout
	}
	return n, err
}

var errBodyTimeout = &wire.APIError{Status: http.StatusRequestTimeout, Type: wire.ErrInvalidRequest, Code: "request_timeout",
	Message: "The request body was not received in time."}
