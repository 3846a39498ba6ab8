package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/respgate/respgate/internal/jsonscan"
)

// Defaults of Config.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultMaxEventBytes  = 16 << 20
)

// Config configures a Client. The zero value of every field but BaseURL is a sensible default.
type Config struct {
	// BaseURL is vLLM's base URL including /v1, e.g. http://localhost:8000/v1.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer"; empty sends no Authorization. It never appears
	// in errors or logs, and String redacts it.
	APIKey string
	// ConnectTimeout bounds dialling, TLS and, for Stream and Models, the wait for response
	// headers. For Create it ends once the request is written: vLLM sends the headers of a
	// non-streamed answer only after generating it, so bound Create with its context. Default
	// 10s. It relies on httptrace for Create; a custom Transport that does not report
	// WroteRequest makes it bound Create's headers too.
	ConnectTimeout time.Duration
	// IdleTimeout is the longest silence allowed between bytes of a response body (a stream, or
	// a non-stream body once its headers arrived). Time the caller spends in the body of its
	// Stream.Events loop does not count. Default 60s.
	IdleTimeout time.Duration
	// MaxEventBytes bounds the raw size of one SSE event (field names, data lines and line
	// endings) and of a non-stream body; larger gives KindEventTooLarge, and memory stays bounded
	// by a small multiple of it per stream. Default 16 MiB.
	MaxEventBytes int
	// Transport is the RoundTripper to use; default a tuned *http.Transport with up to 1024 idle
	// connections to the one vLLM host, since the gateway multiplexes many streams onto it.
	Transport http.RoundTripper
	// Logger, when set, gets one line per failed request (LogFailure): the URL without
	// credentials and the cause, at warn (info for a 4xx that describes the request). nil logs
	// nothing.
	Logger *slog.Logger
}

// String prints the config with the API key redacted.
func (c Config) String() string {
	key := ""
	if c.APIKey != "" {
		key = "[redacted]"
	}
	// A URL that does not parse could hold a password where no parser finds it: never print it.
	base := "<unparseable, redacted>"
	if u, err := url.Parse(c.BaseURL); err == nil {
		base = redactedURL(u)
	}
	return fmt.Sprintf("upstream.Config{BaseURL:%q APIKey:%q ConnectTimeout:%s IdleTimeout:%s MaxEventBytes:%d}",
		base, key, c.ConnectTimeout, c.IdleTimeout, c.MaxEventBytes)
}

// GoString is String.
func (c Config) GoString() string { return c.String() }

// Format prints String for every verb, so %+v and %#v cannot print the key.
func (c Config) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, c.String()) }

// LogValue logs the config with the API key redacted.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// Client calls one vLLM server. It is safe for concurrent use; make one per upstream and share it.
type Client struct {
	cfg            Config // defaults applied
	hc             *http.Client
	ownTransport   *http.Transport // nil when Config.Transport was given
	responsesURL   string
	modelsURL      string
	tokenizeURL    string
	auth           string // "Bearer <key>" or ""
	connectTimeout time.Duration
	idleTimeout    time.Duration
	maxEventBytes  int
	redact         redactor
}

// New checks cfg, applies the defaults and returns a Client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" ||
		u.Fragment != "" {
		// Never echo the URL: it may hold credentials.
		return nil, errors.New("upstream: BaseURL must be an absolute http(s) URL without query or fragment")
	}
	if cfg.ConnectTimeout < 0 || cfg.IdleTimeout < 0 || cfg.MaxEventBytes < 0 {
		return nil, errors.New("upstream: timeouts and MaxEventBytes must not be negative")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxEventBytes == 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	c := &Client{
		cfg:            cfg,
		connectTimeout: cfg.ConnectTimeout,
		idleTimeout:    cfg.IdleTimeout,
		maxEventBytes:  cfg.MaxEventBytes,
		redact:         newRedactor(u, cfg.APIKey),
	}
	base := strings.TrimSuffix(u.String(), "/")
	c.responsesURL = base + "/responses"
	c.modelsURL = base + "/models"
	// vLLM serves /tokenize beside /v1, not under it.
	c.tokenizeURL = strings.TrimSuffix(base, "/v1") + "/tokenize"
	if cfg.APIKey != "" {
		c.auth = "Bearer " + cfg.APIKey
	}
	rt := cfg.Transport
	if rt == nil {
		c.ownTransport = newTransport(cfg.ConnectTimeout)
		rt = c.ownTransport
	}
	c.hc = &http.Client{
		Transport: rt,
		// A redirect would replay the body (and the key) somewhere else, or turn POST into GET;
		// report the 3xx instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

func newTransport(connect time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ExpectContinueTimeout: time.Second,
		// SSE must not sit in a gzip reader's buffer, and vLLM does not compress anyway.
		DisableCompression: true,
	}
}

// String prints a safe summary, never the API key.
func (c *Client) String() string { return "upstream.Client{" + c.cfg.String() + "}" }

// GoString is String.
func (c *Client) GoString() string { return c.String() }

// Format prints String for every verb.
func (c *Client) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, c.String()) }

// LogValue logs the redacted config.
func (c *Client) LogValue() slog.Value { return c.cfg.LogValue() }

// CloseIdleConnections closes the idle keep-alive connections of the Client's transport (for
// shutdown, and for tests that check for leaked goroutines).
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// call is the state of one request: the caller's context, the request's own context (cancelled
// with a cause by our timers and by Stream.Close) and the idle timer.
type call struct {
	caller context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   *time.Timer
	idleD  time.Duration
}

// headersBound says how long the connect timer runs.
type headersBound bool

const (
	untilHeaders headersBound = true  // Stream, Models
	untilWritten headersBound = false // Create: vLLM answers only after generating
)

// smallBody is the largest request body sent as a copy rather than lent (lentBody): net/http
// writes the request line, the headers and a body it knows to be in memory in one write, where
// it flushes the headers before a body of any other type, the lent one's included. The upstream
// then gets the headers and the body in two segments, and its reader may wake twice to read them
// (docs/scaling.md, "The request in one segment"). The transport's write buffer is 4 KiB: a
// longer body takes one write more per 4 KiB through it as an in-memory reader, and one write in
// all when lent, so a longer body is lent.
const smallBody = 3 << 10

// do sends one request and returns a 2xx response, whose body the caller reads through an
// idleReader and releases with call.end; any other answer becomes an *Error here, after reading
// at most maxErrorBody bytes of it to find vLLM's envelope.
func (c *Client) do(ctx context.Context, method, u string, body []byte, accept string, bound headersBound, release func()) (*http.Response, *call, error) {
	// A lent body (release set) goes to the transport through a lentBody, which releases it; one
	// never handed over (an empty body, sent as none, or a call that ends before sending) is the
	// caller's again when do returns. A small one is sent as a copy (smallBody), and is the
	// caller's again at once.
	lend := release != nil && len(body) > smallBody
	if release != nil && len(body) > 0 && !lend {
		body = bytes.Clone(body)
	}
	var lent *lentBody
	if release != nil {
		defer func() {
			if lent == nil {
				release()
			}
		}()
	}
	if ctx.Err() != nil {
		return nil, nil, ctxError(ctx)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	connect := time.AfterFunc(c.connectTimeout, func() { cancel(errConnectTimeout) })
	reqCtx := rctx
	if bound == untilWritten {
		reqCtx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
			WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err == nil {
					connect.Stop()
				}
			},
		})
	}
	req, err := c.newRequest(reqCtx, method, u, body, lend, accept)
	if err != nil {
		connect.Stop()
		cancel(nil)
		return nil, nil, err
	}
	if lend {
		lent = newLentBody(req, body, release)
	}
	resp, err := c.hc.Do(req)
	if lent != nil {
		lent.roundTripped()
	}
	connect.Stop()
	if err != nil {
		err = c.classify(ctx, rctx, err, false)
		cancel(nil)
		c.logFailure(ctx, method, u, err)
		return nil, nil, err
	}
	cl := &call{caller: ctx, ctx: rctx, cancel: cancel, idleD: c.idleTimeout}
	cl.idle = time.AfterFunc(c.idleTimeout, func() { cancel(errIdleTimeout) })
	cl.idle.Stop()
	if context.Cause(rctx) != nil { // the connect timer fired as the headers arrived
		err := c.classify(ctx, rctx, context.Cause(rctx), true)
		cl.end(resp.Body)
		c.logFailure(ctx, method, u, err)
		return nil, nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := c.statusError(ctx, rctx, resp, cl)
		cl.end(resp.Body)
		c.logFailure(ctx, method, u, err)
		return nil, nil, err
	}
	return resp, cl, nil
}

// newRequest builds the request of a call: body as a reader unless it is lent (the caller wraps
// it in a lentBody), and the call's headers.
func (c *Client) newRequest(ctx context.Context, method, u string, body []byte, lend bool, accept string) (*http.Request, error) {
	var rd io.Reader
	if body != nil && !lend {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, &Error{Kind: KindBadBody, Message: "cannot build the request", cause: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "respgate")
	if h, ok := ctx.Value(headerKey{}).(ctxHeader); ok {
		req.Header.Set(h.name, h.value)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	return req, nil
}

// statusError is the error of a non-2xx answer, from its body (a huge one is cut: what was read
// may still hold the envelope), or why the body could not be read.
func (c *Client) statusError(caller, rctx context.Context, resp *http.Response, cl *call) error {
	b, rerr := cl.readAll(resp.Body, maxErrorBody)
	var tooLarge *Error
	if rerr == nil || errors.As(rerr, &tooLarge) && tooLarge.Kind == KindEventTooLarge {
		return c.httpError(resp.StatusCode, resp.Header, b)
	}
	err := c.classify(caller, rctx, rerr, true)
	if e := (*Error)(nil); errors.As(err, &e) {
		e.Status = resp.StatusCode
	}
	return err
}

// logFailure logs a failed request to Config.Logger: a 502 upstream_unreachable must say which
// URL failed and why, or an operator cannot tell a wrong address from a down vLLM. The URL loses
// its user info; vLLM's own message is left out (a validation error may quote the request), the
// messages this package writes (dial, DNS, TLS, timeouts) are kept. A caller's cancellation is
// not a failure of vLLM and is not logged.
func (c *Client) logFailure(ctx context.Context, method, target string, err error) {
	var e *Error
	if c.cfg.Logger == nil || !errors.As(err, &e) || e.Kind == KindCanceled {
		return
	}
	attrs := []any{"method", method, "url", urlWithoutCredentials(target), "kind", e.Kind.String()}
	level := slog.LevelWarn
	if e.Status != 0 {
		attrs = append(attrs, "upstream_status", e.Status)
	}
	if e.Kind == KindHTTP {
		if e.Type != "" {
			attrs = append(attrs, "type", e.Type)
		}
		if e.Code != "" {
			attrs = append(attrs, "code", e.Code)
		}
		switch e.Status {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			level = slog.LevelInfo // the request's own fault, answered by vLLM as it should
		}
	} else {
		attrs = append(attrs, "cause", e.Message)
	}
	if e.Status == http.StatusNotFound && !strings.HasSuffix(strings.TrimSuffix(c.cfg.BaseURL, "/"), "/v1") {
		attrs = append(attrs, "hint", "the upstream URL usually ends in /v1 (e.g. http://vllm:8000/v1)")
	}
	c.cfg.Logger.Log(ctx, level, "upstream request failed", attrs...)
}

// urlWithoutCredentials is s without its user info (a token may stand there as a user name).
func urlWithoutCredentials(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparseable, redacted>"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	return u.String()
}

// end releases the request: stops the idle timer, closes the body and cancels the context.
func (cl *call) end(body io.Closer) {
	cl.idle.Stop()
	_ = body.Close()
	cl.cancel(nil)
}

// idleReader arms the idle timer around every Read of a response body, so silence is measured
// only while someone waits for bytes: no goroutine per read, and two timer operations per Read
// (not per event).
type idleReader struct {
	r    io.Reader
	cl   *call
	d    time.Duration
	eof  bool // r returned io.EOF
	tail int  // bytes of eventTerminator already returned after eof (Stream only)
	sse  bool
	// before runs before each read of r (Stream.BeforeRead), not after its end.
	before func()
}

// eventTerminator is appended to a stream's body at a clean EOF so go-sse dispatches a final
// event that lacks its blank line (sse.Read discards it otherwise).
const eventTerminator = "\n\n"

func (r *idleReader) Read(p []byte) (int, error) {
	if r.eof {
		return r.terminate(p)
	}
	if r.before != nil {
		r.before()
	}
	r.cl.idle.Reset(r.d)
	n, err := r.r.Read(p)
	r.cl.idle.Stop()
	if err == io.EOF {
		r.eof = true
		if n > 0 {
			return n, nil
		}
		return r.terminate(p)
	}
	return n, err
}

func (r *idleReader) terminate(p []byte) (int, error) {
	if !r.sse || r.tail == len(eventTerminator) {
		return 0, io.EOF
	}
	n := copy(p, eventTerminator[r.tail:])
	r.tail += n
	return n, nil
}

// injected reports whether the reader has started returning the terminator: an event decoded
// after that lacked its own blank line.
func (r *idleReader) injected() bool { return r.tail > 0 }

// readAll reads a whole body, at most limit bytes; more is KindEventTooLarge (with the first
// limit bytes returned).
func (cl *call) readAll(body io.Reader, limit int) ([]byte, error) {
	rd := &idleReader{r: body, cl: cl, d: cl.idleD}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(rd, int64(limit)+1))
	if err != nil {
		return buf.Bytes(), err
	}
	if n > int64(limit) {
		return buf.Bytes()[:limit], &Error{Kind: KindEventTooLarge, Message: "body exceeds " + strconv.Itoa(limit) + " bytes"}
	}
	return buf.Bytes(), nil
}

// Create sends a non-streamed request (POST {BaseURL}/responses) with body exactly as given (the
// caller sets "stream":false) and returns vLLM's raw JSON answer on 2xx. Every failure is an
// *Error. The time to the answer's headers is bounded only by ctx (see Config.ConnectTimeout).
func (c *Client) Create(ctx context.Context, body []byte) ([]byte, error) {
	return c.getJSON(ctx, http.MethodPost, c.responsesURL, body, untilWritten)
}

// Models returns the raw JSON of GET {BaseURL}/models.
func (c *Client) Models(ctx context.Context) ([]byte, error) {
	return c.getJSON(ctx, http.MethodGet, c.modelsURL, nil, untilHeaders)
}

// Tokenize returns the raw JSON of POST /tokenize (vLLM's TokenizeCompletionRequest or
// TokenizeChatRequest → TokenizeResponse {"count",…}), at the server's root beside /v1: the
// gateway sizes a turn with the model's own tokenizer and chat template. A server without the
// route answers 404 (*Error, KindHTTP).
func (c *Client) Tokenize(ctx context.Context, body []byte) ([]byte, error) {
	return c.getJSON(ctx, http.MethodPost, c.tokenizeURL, body, untilHeaders)
}

func (c *Client) getJSON(ctx context.Context, method, u string, body []byte, bound headersBound) ([]byte, error) {
	resp, cl, err := c.do(ctx, method, u, body, "application/json", bound, nil)
	if err != nil {
		return nil, err
	}
	defer cl.end(resp.Body)
	if resp.ContentLength > int64(c.maxEventBytes) {
		return nil, &Error{Kind: KindEventTooLarge, Status: resp.StatusCode,
			Message: "body exceeds " + strconv.Itoa(c.maxEventBytes) + " bytes"}
	}
	b, err := cl.readAll(resp.Body, c.maxEventBytes)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Status = resp.StatusCode
			return nil, e
		}
		return nil, c.classify(ctx, cl.ctx, err, true)
	}
	// jsonscan's rules, as the accumulator's that reads a Create answer next (and at about a third
	// of encoding/json.Valid's cost: 4.5% of a non-streamed turn's CPU was that scan).
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' || !jsonscan.Valid(b) {
		return nil, &Error{Kind: KindBadBody, Status: resp.StatusCode, Message: "2xx answer is not a JSON object"}
	}
	return b, nil
}

// Stream sends a streamed request (POST {BaseURL}/responses, body as given with "stream":true)
// and returns once vLLM answered 2xx with Content-Type text/event-stream. Every failure is an
// *Error. ctx governs the whole stream: cancelling it aborts the request at once, including a
// read of Stream.Events blocked on the body. The caller must Close the Stream.
func (c *Client) Stream(ctx context.Context, body []byte) (*Stream, error) {
	return c.StreamLent(ctx, body, nil)
}

// StreamLent is Stream with body lent to the transport: release is called exactly once, after
// the request has been sent or has failed, when the transport holds no reader of body any more
// (it may close one after the call returned, http.RoundTripper); from then on the caller may
// reuse body's buffer. Until then the caller must not change it. A nil release is Stream.
func (c *Client) StreamLent(ctx context.Context, body []byte, release func()) (*Stream, error) {
	resp, cl, err := c.do(ctx, http.MethodPost, c.responsesURL, body, "text/event-stream", untilHeaders, release) //nolint:bodyclose // cl.end closes it on failure, Stream.Close otherwise
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		cl.end(resp.Body)
		msg := "stream answered without Content-Type text/event-stream"
		if mt != "" && len(mt) <= 64 {
			msg += " (got " + c.redact.clean(mt, 64) + ")"
		}
		return nil, &Error{Kind: KindBadBody, Status: resp.StatusCode, Message: msg}
	}
	return c.newStream(cl, resp.StatusCode, resp.Body), nil
}

// headerKey is the context key of WithHeader's header.
type headerKey struct{}

type ctxHeader struct{ name, value string }

// WithHeader returns ctx carrying one extra request header that every call made with it sends:
// the routing-key header an external router's session affinity reads
// (--upstream-affinity-header, docs/fleet.md). The Client's own headers (Authorization,
// Content-Type, Accept, User-Agent) win over it: name one of them and it is ignored.
func WithHeader(ctx context.Context, name, value string) context.Context {
	switch http.CanonicalHeaderKey(name) {
	case "Authorization", "Content-Type", "Accept", "User-Agent", "Host", "Content-Length":
		return ctx
	}
	return context.WithValue(ctx, headerKey{}, ctxHeader{name, value})
}
