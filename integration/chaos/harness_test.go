package chaos

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for the auditor's raw reads

	"github.com/respgate/respgate/internal/faultproxy"
	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

const (
	harmony = "openai/gpt-oss-sim"
	apiKey  = "chaos-key"
	// leaseTTL is short so that the lease paths (renewal, expiry, sweep) run within a scenario.
	leaseTTL = 2 * time.Second
)

// TestMain uses pgtest.Main: it stops a throwaway Postgres if one was started and runs goleak.
// The runs mostly wait on the network, so unless -parallel was given more of them run at once
// than go test's default (GOMAXPROCS).
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", "12")
	}
	pgtest.Main(m)
}

// env is one run of one scenario: a database (behind a fault proxy when it is Postgres), the
// simulator behind a fault proxy, the gateway, and the transcripts of every client.
type env struct {
	t       *testing.T
	backend string
	seed    int64
	name    string

	directDSN string // Postgres without the proxy, or the SQLite path
	gwDSN     string // what the gateway connects to
	pg        *faultproxy.Proxy
	up        *faultproxy.Proxy
	sim       *vllmsim.Sim
	simURL    string

	gwURL  string // in-process gateway base URL (no /v1); "" before startGateway
	stopGW func()

	cleanURL string // the auditor's fault-free gateway

	mu     sync.Mutex
	setup  []string // the scenario did not reach what it meant to break
	trs    []*transcript
	audits int // continuation counter
}

// pgEnvs bounds the Postgres runs open at once. A run holds up to about 12 connections (its
// gateway's pool of 4 and listener, the auditor's gateway's, River's, the auditor's reads; a
// process scenario's respgate holds its own), and CI's Postgres allows 100 clients: with the
// matrix's 16 parallel runs the full matrix was refused "too many clients already".
var pgEnvs = make(chan struct{}, 6)

func newEnv(t *testing.T, name, backend string, seed int64) *env {
	if backend == "postgres" {
		pgEnvs <- struct{}{}
		t.Cleanup(func() { <-pgEnvs }) // registered first, so it runs after every other cleanup
	}
	e := &env{t: t, backend: backend, seed: seed, name: name}
	e.sim = vllmsim.New(vllmsim.Options{})
	simHTTP := httptest.NewServer(e.sim)
	t.Cleanup(simHTTP.Close)
	e.simURL = simHTTP.URL
	e.up = faultproxy.New(t, strings.TrimPrefix(simHTTP.URL, "http://"))
	switch backend {
	case "postgres":
		e.directDSN = pgtest.DSN(t)
		u, err := url.Parse(e.directDSN)
		if err != nil {
			t.Fatal(err)
		}
		e.pg = faultproxy.New(t, u.Host)
		u.Host = e.pg.Addr()
		q := u.Query()
		// Every statement's SQL text goes over the wire (no statement cache), so that a trigger
		// can hit a phase by its SQL (history load, in-progress write, commit).
		q.Set("default_query_exec_mode", "describe_exec")
		q.Set("connect_timeout", "10")
		u.RawQuery = q.Encode()
		e.gwDSN = u.String()
	case "sqlite":
		e.directDSN = filepath.Join(t.TempDir(), "respgate.db")
		e.gwDSN = e.directDSN
	}
	return e
}

// openStore opens the backend at dsn (migrating it).
func (e *env) openStore(dsn string) (store.Store, error) {
	// Opening migrates (River's migrations too); on a loaded machine with the matrix's parallel
	// runs that took over 30 s once. A hung open still ends, in the test's own timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if e.backend == "postgres" {
		return postgres.Open(ctx, dsn)
	}
	return sqlite.Open(ctx, dsn)
}

func gatewayConfig() server.Config {
	return server.Config{
		LeaseTTL:      leaseTTL,
		SweepInterval: sweepInterval,
		WriteTimeout:  300 * time.Millisecond,
		SyncTimeout:   2 * time.Second,  // a stalled non-streamed call ends in a 504, not in 10 minutes
		CommitTimeout: 10 * time.Second, // generous: a loaded machine is not a database fault
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// startGateway starts respgate in-process on the env's store (through the Postgres proxy) and
// the simulator (through the upstream proxy). The returned stop shuts it down and waits.
func (e *env) startGateway(upTimeout time.Duration) {
	e.t.Helper()
	st, err := e.openStore(e.gwDSN)
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	up, err := upstream.New(upstream.Config{BaseURL: "http://" + e.up.Addr() + "/v1",
		ConnectTimeout: upTimeout, IdleTimeout: upTimeout})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := gatewayConfig()
	cfg.SyncTimeout = 2 * upTimeout
	srv, err := server.New(context.Background(), cfg, st, upstream.Single(up))
	if err != nil {
		e.t.Fatalf("server: %v", err)
	}
	hs := httptest.NewServer(srv)
	e.gwURL = hs.URL
	var once sync.Once
	e.stopGW = func() {
		once.Do(func() {
			hs.CloseClientConnections()
			hs.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			_ = st.Close()
		})
	}
	e.t.Cleanup(e.stopGW)
}

// cleanGateway starts (once) a fault-free gateway on the same database and simulator, for the
// auditor's continuations.
func (e *env) cleanGateway() string {
	if e.cleanURL != "" {
		return e.cleanURL
	}
	st, err := e.openStore(e.directDSN)
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	up, err := upstream.New(upstream.Config{BaseURL: e.simURL + "/v1", ConnectTimeout: 30 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := gatewayConfig()
	cfg.SweepInterval = time.Hour
	// The auditor's gateway is not under test: its turns must not time out on a loaded machine
	// (the scenario gateways' 2 s sync limit made continuations answer 504 upstream_timeout).
	cfg.SyncTimeout = 2 * time.Minute
	srv, err := server.New(context.Background(), cfg, st, upstream.Single(up))
	if err != nil {
		e.t.Fatalf("server: %v", err)
	}
	hs := httptest.NewServer(srv)
	e.cleanURL = hs.URL
	e.t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		_ = st.Close()
	})
	return e.cleanURL
}

// clean removes every fault from both proxies and lets them accept again.
func (e *env) clean() {
	e.up.Clear()
	_ = e.up.Accept()
	if e.pg != nil {
		e.pg.Clear()
		_ = e.pg.Accept()
	}
}

// transcript is what one client did and saw.
type transcript struct {
	kind   string // stream, create, delete-response, delete-conversation, conversation
	body   string
	id     string // the response (or conversation) id the client saw
	status int    // HTTP status
	events []string
	// terminal is the status of the terminal event or non-streamed body ("" if none was seen).
	terminal string
	errCode  string
	errMsg   string
	output   []json.RawMessage // output items as the client saw them (terminal response output)
	done     bool              // [DONE] seen
	// faulted: the client itself misbehaved (FIN, RST, stopped reading) or the gateway process
	// was killed under it, so a missing terminal event is not the gateway's fault.
	faulted   bool
	transport string // a transport error, if any
	// bg is what a background response's run must come to (background_test.go); took is how
	// long a cancel call took.
	bg   *bgExpect
	took time.Duration
}

func (e *env) record(tr *transcript) *transcript {
	e.mu.Lock()
	e.trs = append(e.trs, tr)
	e.mu.Unlock()
	return tr
}

// clientAct is what a client does when its stream reaches a phase.
type clientAct int

const (
	actNone     clientAct = iota
	actFIN                // half-close and leave (a clean TCP FIN)
	actRST                // reset the connection (SO_LINGER 0)
	actStopRead           // stop reading and hold the connection until the gateway gives up
)

// Phases of a streamed turn, as the client sees them.
const (
	phHeaders  = "headers"   // response headers arrived, no event read yet
	phCreated  = "created"   // response.created read
	phDelta    = "delta"     // the first output_text delta read
	phItemDone = "item-done" // the message's output_item.done read (the commit comes next)
)

var phases = []string{phHeaders, phCreated, phDelta, phItemDone}

// streamOpts steer one streamed request.
type streamOpts struct {
	base   string // gateway base URL; default the env's
	at     string // phase at which act and hook happen
	act    clientAct
	hook   func(tr *transcript) // runs at phase at, on the reading goroutine
	header map[string]string
	// waitGone is called for actStopRead: it returns once the gateway is done with the turn.
	waitGone func(tr *transcript)
	// slow makes a slow reader: it pauses this long after each event.
	slow time.Duration
}

// stream sends a streamed POST /v1/responses over a raw TCP connection (so the client can FIN,
// RST or stop reading at a phase) and records what it saw.
func (e *env) stream(body string, o streamOpts) *transcript {
	tr := e.record(&transcript{kind: "stream", body: body})
	base := o.base
	if base == "" {
		base = e.gwURL
	}
	u, _ := url.Parse(base)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		tr.transport = err.Error()
		return tr
	}
	defer conn.Close()
	req, _ := http.NewRequest("POST", base+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	for k, v := range o.header {
		req.Header.Set(k, v)
	}
	if err := req.Write(conn); err != nil {
		tr.transport = err.Error()
		return tr
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		tr.transport = err.Error()
		return tr
	}
	defer res.Body.Close()
	tr.status = res.StatusCode
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		parseErrorBody(tr, b)
		return tr
	}
	reached := func(ph string) bool {
		if o.at != ph {
			return false
		}
		if o.hook != nil {
			o.hook(tr)
		}
		switch o.act {
		case actFIN:
			tr.faulted = true
			_ = conn.(*net.TCPConn).CloseWrite()
			// Leave without reading on; the kernel sends FIN, the close below ends it.
			return true
		case actRST:
			tr.faulted = true
			_ = conn.(*net.TCPConn).SetLinger(0)
			return true
		case actStopRead:
			tr.faulted = true
			if o.waitGone != nil {
				o.waitGone(tr)
			}
			return true
		}
		return false
	}
	if reached(phHeaders) {
		return tr
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	sawDelta := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if data == "[DONE]" {
			tr.done = true
			continue
		}
		var ev struct {
			Type     string          `json:"type"`
			Item     json.RawMessage `json:"item"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			tr.events = append(tr.events, "!unparsable")
			continue
		}
		tr.events = append(tr.events, ev.Type)
		if o.slow > 0 {
			time.Sleep(o.slow)
		}
		switch ev.Type {
		case "response.created":
			var r struct{ ID string }
			_ = json.Unmarshal(ev.Response, &r)
			tr.id = r.ID
			if reached(phCreated) {
				return tr
			}
		case "response.output_text.delta":
			if !sawDelta {
				sawDelta = true
				if reached(phDelta) {
					return tr
				}
			}
		case "response.output_item.done":
			var it struct{ Type string }
			_ = json.Unmarshal(ev.Item, &it)
			if it.Type == "message" && reached(phItemDone) {
				return tr
			}
		case "response.completed", "response.incomplete", "response.failed":
			parseResponse(tr, ev.Response)
		}
	}
	if err := sc.Err(); err != nil {
		tr.transport = err.Error()
	}
	return tr
}

// parseResponse records a response object the client received (terminal event or body).
func parseResponse(tr *transcript, raw json.RawMessage) {
	var r struct {
		ID     string            `json:"id"`
		Status string            `json:"status"`
		Output []json.RawMessage `json:"output"`
		Error  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return
	}
	if tr.id == "" {
		tr.id = r.ID
	}
	tr.terminal = r.Status
	tr.output = r.Output
	if r.Error != nil {
		tr.errCode, tr.errMsg = r.Error.Code, r.Error.Message
	}
}

func parseErrorBody(tr *transcript, b []byte) {
	var env struct {
		Error *struct {
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && env.Error != nil {
		tr.errCode, tr.errMsg = fmt.Sprint(env.Error.Code), env.Error.Message
	}
}

// do sends a plain JSON request and records it; for POST /v1/responses the body is parsed as a
// response.
func (e *env) do(kind, method, base, path, body string) *transcript {
	return e.record(e.send(kind, method, base, path, body))
}

// send is do without recording the transcript (a poll whose last answer alone is recorded).
func (e *env) send(kind, method, base, path, body string) *transcript {
	tr := &transcript{kind: kind, body: body}
	if base == "" {
		base = e.gwURL
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		tr.transport = err.Error()
		return tr
	}
	defer res.Body.Close()
	tr.status = res.StatusCode
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		parseErrorBody(tr, b)
		return tr
	}
	switch kind {
	case "create", "bg-create", "cancel", "get":
		parseResponse(tr, b)
	case "conversation":
		var c struct{ ID string }
		_ = json.Unmarshal(b, &c)
		tr.id = c.ID
	case "delete-response", "delete-conversation":
		var d struct {
			ID      string
			Deleted bool
		}
		_ = json.Unmarshal(b, &d)
		tr.id = d.ID
		if !d.Deleted {
			tr.status = 0
		}
	}
	return tr
}

func (e *env) create(body string) *transcript {
	return e.do("create", "POST", "", "/v1/responses", body)
}

func (e *env) deleteResponse(id string) *transcript {
	tr := e.do("delete-response", "DELETE", "", "/v1/responses/"+id, "")
	if tr.id == "" {
		tr.id = id
	}
	return tr
}

func (e *env) deleteConversation(id string) *transcript {
	tr := e.do("delete-conversation", "DELETE", "", "/v1/conversations/"+id, "")
	if tr.id == "" {
		tr.id = id
	}
	return tr
}

func (e *env) conversation() string {
	tr := e.do("conversation", "POST", "", "/v1/conversations", `{}`)
	if tr.id == "" {
		e.t.Fatalf("create conversation: %d %s %s", tr.status, tr.errMsg, tr.transport)
	}
	return tr.id
}

// body builds a request body: model (with simulator faults as its query), input, extras.
func body(model, input string, stream bool, extra ...string) string {
	b, _ := json.Marshal(input)
	s := fmt.Sprintf(`{"model":%q,"input":%s,"stream":%v`, model, b, stream)
	for _, x := range extra {
		s += "," + x
	}
	return s + "}"
}

// db opens the backend for the auditor's raw reads.
func (e *env) db() *sql.DB {
	e.t.Helper()
	var (
		d   *sql.DB
		err error
	)
	if e.backend == "postgres" {
		d, err = sql.Open("pgx", e.directDSN)
	} else {
		d, err = sql.Open("sqlite", "file:"+e.directDSN+"?_pragma=busy_timeout(10000)")
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// q rewrites ? placeholders for Postgres.
func (e *env) q(s string) string {
	if e.backend != "postgres" {
		return s
	}
	var b bytes.Buffer
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// waitFor polls cond until it holds or the (generous) deadline passes: it waits for an event,
// it asserts nothing about time.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stored returns the stored status of a response ("" if absent).
func (e *env) stored(d *sql.DB, id string) string {
	var s string
	_ = d.QueryRow(e.q(`SELECT status FROM responses WHERE id = ?`), id).Scan(&s)
	return s
}

// terminalStored waits until the response id is stored with a terminal status or is gone: the
// gateway is done with it.
func (e *env) terminalStored(id string) {
	d := e.db()
	defer d.Close()
	waitFor(e.t, "response "+id+" to end", func() bool {
		s := e.stored(d, id)
		return s != "" && s != "in_progress" && s != "queued"
	})
}
