package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/respgate/respgate/wire"
)

// Kind says why an upstream call failed. The server picks the client-facing status from it (see
// Error.APIError) and decides whether the failure is the upstream's or the client's.
type Kind int

// Kinds of upstream failure.
const (
	// KindUnreachable: no connection could be made (connection refused, DNS, dial or TLS
	// handshake failure). Nothing of the request reached vLLM.
	KindUnreachable Kind = iota + 1
	// KindTimeout: the connect timeout (dial to response headers), the idle timeout (silence
	// between bytes) or a deadline of the caller's context expired.
	KindTimeout
	// KindHTTP: vLLM answered non-2xx with its JSON error envelope, or reported an error in an
	// event mid-stream (Stream.EventError); Status, Type, Code, Param and Message hold it (Code
	// as a string whether vLLM sent 404 or "404").
	KindHTTP
	// KindBadBody: the answer was not what the call expects: a non-2xx status without vLLM's
	// envelope, a 2xx body that is not a JSON object, or a stream whose Content-Type is not
	// text/event-stream, or an event without a type. Only Status is kept.
	KindBadBody
	// KindStreamBroken: the connection failed after the request was sent (reset, or the body
	// ended mid-chunk or mid-event).
	KindStreamBroken
	// KindEventTooLarge: one SSE event, or a non-stream body, exceeded Config.MaxEventBytes.
	KindEventTooLarge
	// KindCanceled: the caller's context was cancelled (for the gateway: the client went away).
	KindCanceled
)

var kindNames = [...]string{
	KindUnreachable:   "unreachable",
	KindTimeout:       "timeout",
	KindHTTP:          "http",
	KindBadBody:       "bad_body",
	KindStreamBroken:  "stream_broken",
	KindEventTooLarge: "event_too_large",
	KindCanceled:      "canceled",
}

// String returns the kind's snake_case name, for logs and metrics labels.
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Error is the error every Client and Stream method returns for an upstream failure (always as
// error; find it with errors.As). All its fields are safe to log: Message is vLLM's own error
// message (cut to 1 KiB, with the upstream URL and API key removed) for KindHTTP, and a short
// description written by this package otherwise; nothing else of an upstream body is kept.
// Unwrap returns the underlying cause (a net, context or io error), which is not sanitised:
// print the Error, not its cause.
type Error struct {
	Kind Kind
	// Status is the upstream HTTP status, 0 when no response arrived (a failure mid-stream
	// keeps the stream's 200; an error event gives the status it names).
	Status int
	// Type, Code and Param are vLLM's envelope fields (KindHTTP only); Code is normalised to a
	// string ("404" for vLLM's integer code).
	Type, Code, Param string
	Message           string
	// RetryAfter is the Retry-After header of a non-2xx answer, checked and normalised
	// (delta-seconds or an HTTP-date; "" when absent or malformed). APIError repeats it on a 429
	// and on 502/503/504.
	RetryAfter string

	cause error
}

// Error prints a safe one-line summary: "upstream: http status=404 NotFoundError code=404: msg".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("upstream: ")
	b.WriteString(e.Kind.String())
	if e.Status != 0 {
		b.WriteString(" status=")
		b.WriteString(strconv.Itoa(e.Status))
	}
	for _, f := range [...]struct{ sep, v string }{
		{" ", e.Type}, {" code=", e.Code}, {" param=", e.Param}, {" retry_after=", e.RetryAfter}, {": ", e.Message},
	} {
		if f.v != "" {
			b.WriteString(f.sep)
			b.WriteString(f.v)
		}
	}
	return b.String()
}

// Unwrap returns the cause, so errors.Is(err, context.Canceled) and similar work.
func (e *Error) Unwrap() error { return e.cause }

// String is Error.
func (e *Error) String() string { return e.Error() }

// GoString is Error, so %#v cannot print the cause.
func (e *Error) GoString() string { return e.Error() }

// Format prints Error for every verb, so %+v and %#v are as safe as %v.
func (e *Error) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, e.Error()) }

// LogValue logs the fields as a group, never the cause.
func (e *Error) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("kind", e.Kind.String())}
	if e.Status != 0 {
		attrs = append(attrs, slog.Int("upstream_status", e.Status))
	}
	if e.Type != "" {
		attrs = append(attrs, slog.String("type", e.Type))
	}
	if e.Code != "" {
		attrs = append(attrs, slog.String("code", e.Code))
	}
	if e.Param != "" {
		attrs = append(attrs, slog.String("param", e.Param))
	}
	if e.RetryAfter != "" {
		attrs = append(attrs, slog.String("retry_after", e.RetryAfter))
	}
	attrs = append(attrs, slog.String("message", e.Message))
	return slog.GroupValue(attrs...)
}

// openAIClientTypes are the error types of OpenAI's envelope that may describe a 4xx the client
// caused; vLLM's own names (BadRequestError, NotFoundError) become invalid_request_error.
var openAIClientTypes = map[string]bool{
	wire.ErrInvalidRequest: true,
	wire.ErrNotFound:       true,
}

// msgTimeout is the message of every upstream timeout, the same sentence the server uses when its
// own bound of a non-streamed call fires (server/turn.go), so a client sees one envelope for a
// timeout whichever timer caught it, streamed or not.
const msgTimeout = "The upstream model server did not answer in time."

// The messages of the other failures that are not vLLM's own answer: each says which failure it
// was (docs/errors.md), the same streamed (in response.failed) or not.
const (
	msgUnreachable = "The upstream model server could not be reached."
	msgBroken      = "The connection to the upstream model server broke before the response was complete."
	msgTooLarge    = "The upstream model server's answer exceeds the gateway's size limit."
	msgBadBody     = "The upstream model server sent an answer the gateway cannot read"
)

// APIError maps e to the envelope the gateway sends its own client (docs/style.md, "Error envelope"; the
// table, and why each row is what it is, is in docs/errors.md):
//
//   - unreachable, stream broken, event too large: 502 server_error;
//   - timeout (connect, idle, the caller's deadline): 504 server_error upstream_timeout;
//   - an answer with status 429, from vLLM or from a proxy in front of it: 429 with type
//     wire.ErrRateLimit and code wire.CodeRateLimit; 502, 503 and 504: the same status,
//     server_error, upstream_unavailable. Both keep the upstream's Retry-After;
//   - any other answer without vLLM's envelope (bad body): 502 server_error; only the upstream
//     status survives, in the message;
//   - http 4xx: the same status, invalid_request_error unless vLLM sent an OpenAI client error
//     type, vLLM's message, param translated to the client's own field name, code a string or
//     null (never vLLM's number); a context-length message gets context_length_exceeded and an
//     unknown model 404 model_not_found. Exceptions: 401, 403 and 407 mean vLLM rejected the
//     gateway's own credentials, and 404/405 with vLLM's route-level type mean it does not serve
//     the route; the client can fix neither, so they become 502;
//   - http 501 for tool_choice (vLLM's harmony path only supports auto and none): 400
//     invalid_request_error, param tool_choice, code unsupported_value;
//   - other http 5xx (and any other non-2xx): 502 server_error upstream_error with vLLM's message;
//   - canceled: 499, which the server logs and never writes.
//
// Every relayed upstream message has URLs and file paths replaced (scrubMessage) on top of the
// redaction every Error's fields already had.
func (e *Error) APIError() *wire.APIError {
	var msg string
	switch e.Kind {
	case KindUnreachable:
		return &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: "upstream_unreachable",
			Message: msgUnreachable}
	case KindTimeout:
		return &wire.APIError{Status: http.StatusGatewayTimeout, Type: wire.ErrServer, Code: "upstream_timeout",
			Message: msgTimeout}
	case KindCanceled:
		return &wire.APIError{Status: 499, Type: wire.ErrInvalidRequest, Message: "client closed request"}
	case KindStreamBroken:
		msg = msgBroken
	case KindEventTooLarge:
		msg = msgTooLarge
	case KindHTTP, KindBadBody:
		if ae := e.statusError(); ae != nil {
			return ae
		}
		if e.Kind == KindHTTP {
			return e.httpAPIError()
		}
	}
	if msg == "" { // KindBadBody and anything unknown
		msg = msgBadBody + "."
		if e.Status != 0 {
			msg = msgBadBody + " (status " + strconv.Itoa(e.Status) + ")."
		}
	}
	// A stream broken, an event too large, an answer the gateway cannot read: the one 502
	// upstream_error envelope whose message says which failure it was.
	return &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: "upstream_error", Message: msg}
}

// statusError maps the statuses whose meaning does not depend on the body: a rate limit or an
// unavailable upstream, whether vLLM said so in its envelope or a proxy in front of it answered
// with an HTML page. It returns nil for any other status.
func (e *Error) statusError() *wire.APIError {
	msg := ""
	if e.Kind == KindHTTP {
		msg = scrubMessage(e.Message)
	}
	switch e.Status {
	case http.StatusTooManyRequests:
		if msg == "" {
			msg = "The upstream model server is rate limiting requests; retry later."
		}
		return &wire.APIError{Status: e.Status, Type: wire.ErrRateLimit, Code: wire.CodeRateLimit, Message: msg,
			RetryAfter: e.RetryAfter}
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if msg == "" {
			msg = "The upstream model server is unavailable (status " + strconv.Itoa(e.Status) + "); retry later."
		}
		return &wire.APIError{Status: e.Status, Type: wire.ErrServer, Code: "upstream_unavailable", Message: msg,
			RetryAfter: e.RetryAfter}
	}
	return nil
}

// httpAPIError maps an answer in vLLM's envelope with any status statusError left.
func (e *Error) httpAPIError() *wire.APIError {
	status := strconv.Itoa(e.Status)
	msg := scrubMessage(e.Message)
	switch s := e.Status; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden || s == http.StatusProxyAuthRequired:
		return &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: "upstream_error",
			Message: "upstream rejected the gateway's credentials (status " + status + ")"}
	case (s == http.StatusNotFound || s == http.StatusMethodNotAllowed) && e.Type == http.StatusText(s):
		// vLLM's http_exception_handler names the type after the status phrase: the route itself
		// is missing, as for FastAPI's bare {"detail":"Not Found"} (a bad body, 502 too).
		return &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: "upstream_error",
			Message: "upstream does not serve this route (status " + status + ")"}
	case s == http.StatusNotImplemented && strings.Contains(msg, "tool_choice"):
		// vLLM's harmony path raises NotImplementedError for a tool_choice other than auto or
		// none (upstream/vllmsim/sim.go reproduces it): the client's value is unsupported.
		return &wire.APIError{Status: http.StatusBadRequest, Type: wire.ErrInvalidRequest, Code: "unsupported_value",
			Param: "tool_choice", Message: msg}
	case s >= 400 && s < 500:
		typ := wire.ErrInvalidRequest
		if openAIClientTypes[e.Type] {
			typ = e.Type
		}
		if msg == "" {
			msg = "upstream rejected the request (status " + status + ")"
		}
		ae := &wire.APIError{Status: s, Type: typ, Code: clientCode(e.Code), Param: clientParam(e.Param), Message: msg}
		switch {
		case s == http.StatusNotFound && (ae.Param == "model" || isUnknownModel(msg)):
			ae.Type, ae.Code, ae.Param = wire.ErrInvalidRequest, "model_not_found", "model"
			if isUnknownModel(e.Message) {
				// It only repeats the client's own model name, which is often a path ("/models/x"
				// when vLLM serves a local directory): nothing to scrub.
				ae.Message = e.Message
			}
		case isContextLength(msg):
			// vLLM names the prompt "input" or "input_tokens" (VLLMValidationError's parameter)
			// or nothing; the client's own field is input, or max_output_tokens when the message
			// is about vLLM's max_tokens.
			ae.Code, ae.Param = "context_length_exceeded", "input"
			if strings.Contains(msg, "max_tokens") {
				ae.Param = "max_output_tokens"
			}
		}
		return ae
	}
	if msg == "" {
		msg = "upstream error (status " + status + ")"
	}
	return &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: "upstream_error", Message: msg}
}

// clientCode turns vLLM's code into the envelope's: vLLM puts the HTTP status there, as a number
// or, in newer trees, a string (docs/errors.md), which is no code a client can match, so a
// numeric code becomes null; a word-like code is kept.
func clientCode(code string) string {
	if code == "" || len(code) > 64 {
		return ""
	}
	digits := true
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case '0' <= c && c <= '9':
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_', c == '.', c == '-':
			digits = false
		default:
			return ""
		}
	}
	if digits {
		return ""
	}
	return code
}

// clientParam turns vLLM's param into the name of the client's own request field. vLLM's
// validation errors name a location in its body ("body.input", or "body -> input" in older
// trees). Only the top-level field is kept: an index below it ("body.input.3.content") counts the
// rehydrated input the gateway sent, not the input the client sent, so it would point at the
// wrong item. Anything that is not a plain field name becomes null.
func clientParam(p string) string {
	p = strings.ReplaceAll(p, " -> ", ".")
	p = strings.TrimPrefix(p, "body")
	p = strings.TrimPrefix(p, ".")
	if i := strings.IndexAny(p, ".["); i >= 0 {
		p = p[:i]
	}
	if p == "" || len(p) > 64 {
		return ""
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !('a' <= c && c <= 'z' || c == '_' || i > 0 && '0' <= c && c <= '9') {
			return ""
		}
	}
	return p
}

// isUnknownModel recognises vLLM's _check_model message, for trees that send param null.
func isUnknownModel(msg string) bool {
	return strings.HasPrefix(msg, "The model ") && strings.HasSuffix(msg, " does not exist.")
}

// isContextLength recognises vLLM's messages for a prompt (or prompt plus max_tokens) longer
// than the model's context: "This model's maximum context length is N tokens…", "The engine
// prompt length N exceeds the max_model_len M…" (the responses path, reproduced in
// upstream/vllmsim/sim.go), and "…is too long and exceeds limit of N" (the renderer).
func isContextLength(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "maximum context length") || strings.Contains(m, "max_model_len") ||
		strings.Contains(m, "too long and exceeds limit")
}

var (
	urlPattern  = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)
	pathPattern = regexp.MustCompile("(^|[\\s\"'(\\[`=:,])((?:/[\\w.@+-]+){2,}/?)")
)

// scrubMessage removes what an upstream message may carry about the upstream's insides: URLs
// (of any host; the redactor already replaced the upstream's own) and absolute file paths
// (docs/style.md: internal error text never reaches message). A model name such as "org/model" has no
// leading slash and stays.
func scrubMessage(msg string) string {
	msg = urlPattern.ReplaceAllString(msg, "[url]")
	return pathPattern.ReplaceAllString(msg, "${1}[path]")
}

// retryAfter returns the upstream's Retry-After value when it is one a client can act on:
// delta-seconds or an HTTP-date, normalised (docs/errors.md, "Rate limits and Retry-After"). Anything else gives "", so a
// malformed or hostile header is never repeated.
func retryAfter(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 64 {
		return ""
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return strconv.FormatUint(n, 10)
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.UTC().Format(http.TimeFormat)
	}
	return ""
}

// IsClientGone reports whether err is an upstream failure caused by the caller's context being
// cancelled: the gateway's client left, which is not the upstream's fault (log it as such, do not
// count it as an upstream error; docs/style.md, the relay model).
func IsClientGone(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindCanceled
}

// ErrClosed ends Stream.Events after Close (also when Close interrupts a read blocked on the body).
var ErrClosed = errors.New("upstream: stream closed")

// Causes set on a request's context by this package's timers, so a failed read can be
// classified after the fact.
var (
	errConnectTimeout = errors.New("upstream: connect timeout")
	errIdleTimeout    = errors.New("upstream: idle timeout")
)

// Size caps of what an Error keeps from vLLM's envelope.
const (
	maxMessageBytes = 1 << 10
	maxFieldBytes   = 256
	maxErrorBody    = 64 << 10 // bytes of a non-2xx body read to find the envelope
)

// redactor removes the upstream URL and the API key from text that leaves the package.
type redactor struct {
	secrets []string // longest first
}

func newRedactor(base *url.URL, apiKey string) redactor {
	var s []string
	add := func(v string) {
		if len(v) >= 3 {
			s = append(s, v)
		}
	}
	add(apiKey)
	add(strings.TrimSuffix(base.String(), "/"))
	add(base.Redacted())
	add(base.Scheme + "://" + base.Host)
	add(base.Host)
	// A bare host name is only replaced when it cannot be an ordinary word ("vllm").
	if h := base.Hostname(); strings.ContainsAny(h, ".:") {
		add(h)
	}
	if base.User != nil {
		add(base.User.String())
	}
	// Query values are for a proxy in front of vLLM (?api_key=…): secrets (issue 38 item 7).
	add(redactedURL(base))
	for _, vs := range base.Query() {
		for _, v := range vs {
			add(v)
		}
	}
	// Longest first, so a URL is replaced whole before its host.
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && len(s[j]) > len(s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return redactor{secrets: s}
}

func (r redactor) clean(s string, limit int) string {
	if len(s) > 4*limit {
		s = s[:4*limit] // bound the work on a hostile message
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for _, v := range r.secrets {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, "[upstream]")
		}
	}
	s = strings.Map(func(c rune) rune {
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
			return ' '
		}
		return c
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// ctxError classifies the end of the caller's context.
// The cause keeps both the context's error and its cause (context.WithCancelCause), so
// errors.Is finds context.Canceled as well as the caller's own reason.
func ctxError(ctx context.Context) *Error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause != err { //nolint:errorlint // identity: is the cause the context's own error value?
		cause = fmt.Errorf("%w: %w", err, cause)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: KindTimeout, Message: "caller's deadline exceeded", cause: cause}
	}
	return &Error{Kind: KindCanceled, Message: "canceled by the caller", cause: cause}
}

// classify turns a transport error into an *Error (or ErrClosed). caller is the caller's
// context, req the request's own (derived) context whose cause tells our timers and Close apart.
// headers says whether response headers arrived: before them, dial, DNS and TLS failures are
// KindUnreachable; any other transport failure is KindStreamBroken.
func (c *Client) classify(caller, req context.Context, err error, headers bool) error {
	if caller.Err() != nil {
		return ctxError(caller)
	}
	switch cause := context.Cause(req); {
	case errors.Is(cause, errConnectTimeout):
		return &Error{Kind: KindTimeout, Message: "no response headers within " + c.connectTimeout.String(), cause: err}
	case errors.Is(cause, errIdleTimeout):
		return &Error{Kind: KindTimeout, Message: "no bytes for " + c.idleTimeout.String(), cause: err}
	case errors.Is(cause, ErrClosed):
		return ErrClosed
	}
	if errors.Is(err, bufio.ErrTooLong) {
		return &Error{Kind: KindEventTooLarge,
			Message: "event exceeds " + strconv.Itoa(c.maxEventBytes) + " bytes", cause: err}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		return &Error{Kind: KindTimeout, Message: c.describe(err), cause: err}
	}
	if !headers && unreachable(err) {
		return &Error{Kind: KindUnreachable, Message: c.describe(err), cause: err}
	}
	return &Error{Kind: KindStreamBroken, Message: c.describe(err), cause: err}
}

// unreachable reports whether err happened before the request could be sent: dialling, DNS,
// a proxy's CONNECT, or the TLS handshake.
func unreachable(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var (
		rh  tls.RecordHeaderError
		ae  tls.AlertError
		cv  *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		hn  x509.HostnameError
		cie x509.CertificateInvalidError
	)
	return errors.As(err, &rh) || errors.As(err, &ae) || errors.As(err, &cv) || errors.As(err, &ua) ||
		errors.As(err, &hn) || errors.As(err, &cie)
}

// describe summarises a transport error without addresses, URLs, certificate names or upstream
// bytes (net/http quotes a malformed response in its error text): operation names and errno text
// only.
func (c *Client) describe(err error) string {
	var parts []string
	var op *net.OpError
	if errors.As(err, &op) && op.Op != "" {
		parts = append(parts, op.Op)
	}
	var dns *net.DNSError
	var errno syscall.Errno
	switch {
	case errors.As(err, &dns):
		switch {
		case dns.IsNotFound:
			parts = append(parts, "lookup: no such host")
		case dns.IsTimeout:
			parts = append(parts, "lookup: timeout")
		default:
			parts = append(parts, "lookup failed")
		}
	case errors.As(err, &errno):
		parts = append(parts, errno.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		parts = append(parts, "unexpected EOF")
	case errors.Is(err, io.EOF):
		parts = append(parts, "connection closed before the response")
	case unreachable(err):
		parts = append(parts, "tls handshake failed")
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			parts = append(parts, "timeout")
		} else {
			parts = append(parts, "transport error")
		}
	}
	return c.redact.clean(strings.Join(parts, ": "), maxFieldBytes)
}

// httpError builds the error for a non-2xx answer from its (bounded) body and its headers:
// KindHTTP when the body holds vLLM's envelope, KindBadBody otherwise.
func (c *Client) httpError(status int, header http.Header, body []byte) error {
	ra := retryAfter(header.Get("Retry-After"))
	env, ok := parseEnvelope(body)
	if !ok {
		return &Error{Kind: KindBadBody, Status: status, RetryAfter: ra, Message: "non-2xx answer without an error envelope"}
	}
	return &Error{
		Kind:       KindHTTP,
		Status:     status,
		RetryAfter: ra,
		Type:       c.redact.clean(env.Type, maxFieldBytes),
		Code:       c.redact.clean(env.Code, maxFieldBytes),
		Param:      c.redact.clean(env.Param, maxFieldBytes),
		Message:    c.redact.clean(env.Message, maxMessageBytes),
	}
}

type envelope struct{ Message, Type, Code, Param string }

// parseEnvelope reads vLLM's error bodies (docs/wire.md §6.1): {"error":{"message","type","param",
// "code"}} with code an integer (older trees) or a string or null (newer), the flat form of older
// releases ({"object":"error","message",…,"code":400}), and {"error":"Unauthorized"} from the
// API-key middleware.
func parseEnvelope(body []byte) (envelope, bool) {
	type fields struct {
		Object  string          `json:"object"`
		Message *string         `json:"message"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    json.RawMessage `json:"code"`
	}
	var top struct {
		fields
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return envelope{}, false
	}
	var f fields
	switch e := bytes.TrimSpace(top.Error); {
	case len(e) > 0 && e[0] == '{':
		if err := json.Unmarshal(e, &f); err != nil || f.Message == nil {
			return envelope{}, false
		}
	case len(e) > 0 && e[0] == '"':
		var s string
		if err := json.Unmarshal(e, &s); err != nil {
			return envelope{}, false
		}
		return envelope{Message: s}, true
	case top.Object == "error" && top.Message != nil:
		f = top.fields
	default:
		return envelope{}, false
	}
	return envelope{Message: *f.Message, Type: f.Type, Code: scalar(f.Code), Param: scalar(f.Param)}, true
}

// scalar renders a JSON string or number as text; null, absent and anything else give "".
func scalar(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			if i, err := n.Int64(); err == nil {
				return strconv.FormatInt(i, 10)
			}
			if f, err := n.Float64(); err == nil && f == float64(int64(f)) {
				return strconv.FormatInt(int64(f), 10) // 404.0
			}
			return n.String()
		}
	}
	return ""
}

// redactedURL is u without its password (url.URL.Redacted) and with every query value replaced:
// vLLM reads no query parameter, so one in its URL is for a proxy in front of it (?api_key=…).
func redactedURL(u *url.URL) string {
	if u.RawQuery == "" {
		return u.Redacted()
	}
	c := *u
	q := c.Query()
	for k := range q {
		q[k] = []string{"REDACTED"}
	}
	c.RawQuery = q.Encode()
	return c.Redacted()
}
