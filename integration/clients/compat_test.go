//go:build compat

package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/integration/orcheck"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// model is the simulator's gpt-oss (harmony) model: vLLM's dialect with every quirk on.
const model = "openai/gpt-oss-sim"

// row is one line of the compatibility table, as the scripts print it ("COMPAT {json}").
type row struct {
	Client       string `json:"client"`
	Mode         string `json:"mode"`
	Tools        string `json:"tools"`
	Continuation string `json:"continuation"`
	Scenario     string `json:"scenario"`
	Result       string `json:"result"`
}

var (
	table   []row
	tableMu sync.Mutex
)

func record(r row) {
	tableMu.Lock()
	defer tableMu.Unlock()
	table = append(table, r)
}

// TestMain runs the clients, then prints the compatibility table (and writes it to
// $COMPAT_REPORT when set).
func TestMain(m *testing.M) {
	code := m.Run()
	killChildren()
	var b strings.Builder
	b.WriteString("| client | version | stream / non-stream | tools | continuation | scenario | result |\n|---|---|---|---|---|---|---|\n")
	for _, r := range table {
		name, ver, _ := strings.Cut(r.Client, " ")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", name, ver, r.Mode, r.Tools, r.Continuation, r.Scenario, r.Result)
	}
	fmt.Print("\nCompatibility (respgate + vLLM simulator, harmony dialect, quirks on):\n\n" + b.String())
	if p := os.Getenv("COMPAT_REPORT"); p != "" {
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		_ = os.WriteFile(p, []byte(b.String()), 0o644)
	}
	os.Exit(code)
}

// gateway is respgate (the real binary, its built-in simulator as the model, SQLite) behind a
// checking proxy: every response object and streamed event a client receives is checked
// against the Open Responses schema and streaming rules (orcheck), and the headers and
// violations are recorded per client.
type gateway struct {
	url    string // the proxy's OpenAI base URL, ending in /v1
	schema *orcheck.Schema
	logs   *bytes.Buffer
	canary []byte // when set, text that must appear in no response byte a client receives

	mu         sync.Mutex
	violations []string
	dropped    []string // X-Respgate-Dropped-Tools values seen
	exchanges  int      // HTTP exchanges and WebSocket turns
	sockets    int      // WebSocket connections (GET /v1/responses upgrades)
	base       string   // respgate's own address, http://host:port
	// expectedErrors are the codes of the error events the current client asserts
	// (expectErrorEvents); any other error event is a violation.
	expectedErrors []string
}

func (g *gateway) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.violations, g.dropped, g.exchanges, g.sockets, g.expectedErrors = nil, nil, 0, 0, nil
}

// socketCount reports how many WebSocket connections clients opened since the last reset.
func (g *gateway) socketCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sockets
}

func (g *gateway) results() (violations, dropped []string, exchanges int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.violations...), append([]string(nil), g.dropped...), g.exchanges
}

// instance is one respgate of the run, started on first use with its extra flags.
type instance struct {
	args   []string
	canary string
	// models, when set, are served by an in-process simulator that respgate uses as its vLLM
	// instead of its built-in one.
	models []vllmsim.Model

	once sync.Once
	g    *gateway
	err  error
}

var (
	rawReasoning = &instance{}
	// hiddenReasoning never shows reasoning text to clients; "Thinking about" begins every
	// reasoning text of the simulator (upstream/vllmsim/doc.go) and nothing else it writes.
	hiddenReasoning = &instance{args: []string{"--reasoning-exposure", "hidden"}, canary: "Thinking about"}
	// openAINamed serves the harmony model under a name shaped like OpenAI's too: the Agents
	// SDK's OpenAIResponsesCompactionSession refuses any other (agents-compaction.mjs).
	openAINamed = &instance{models: []vllmsim.Model{
		{Name: vllmsim.HarmonyModel, Dialect: vllmsim.Harmony},
		{Name: openAINamedModel, Dialect: vllmsim.Harmony},
	}}
)

// openAINamedModel is the harmony model's second name on openAINamed.
const openAINamedModel = "gpt-oss-sim"

// start builds and starts respgate (default settings) once for the whole run.
func start(t *testing.T) *gateway { return rawReasoning.start(t) }

// startHidden starts the respgate with --reasoning-exposure hidden.
func startHidden(t *testing.T) *gateway { return hiddenReasoning.start(t) }

func (in *instance) start(t *testing.T) *gateway {
	t.Helper()
	in.once.Do(func() {
		upstream := "" // the built-in simulator
		if len(in.models) > 0 {
			upstream = httptest.NewServer(vllmsim.New(vllmsim.Options{Models: in.models})).URL + "/v1" // serves until the run ends
		}
		in.g, in.err = startGateway(upstream, in.args...)
		if in.err == nil && in.canary != "" {
			in.g.canary = []byte(in.canary)
		}
	})
	if in.err != nil {
		t.Fatal(in.err)
	}
	in.g.reset()
	return in.g
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// build builds cmd/respgate once for every instance.
func build() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "respgate-compat-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "respgate")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/respgate")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	return binPath, buildErr
}

// startGateway starts respgate on upstream (empty: its built-in simulator) behind the checking
// proxy.
func startGateway(upstream string, args ...string) (*gateway, error) {
	schema, err := orcheck.Load("../testdata/openresponses-openapi-2026-04-24.json")
	if err != nil {
		return nil, err
	}
	bin, err := build()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "respgate-compat-db-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cmd := exec.Command(bin, append([]string{"--listen", addr, "--database-url", "sqlite:" + filepath.Join(dir, "respgate.db"), "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), "RESPGATE_UPSTREAM_URL="+upstream)
	g := &gateway{schema: schema, logs: &bytes.Buffer{}, base: "http://" + addr}
	cmd.Stderr = &syncWriter{w: g.logs, mu: &g.mu}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait() }()
	killAtExit(cmd) // TestMain stops it after the run
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("respgate did not become ready:\n%s", g.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The proxy reads each request whole before forwarding it, so the upstream exchange never
	// depends on the client's connection (httputil.ReverseProxy shares the request body and
	// context with the client, and broke streams here now and then), and relays the response
	// one read at a time, flushing each, through the checker.
	transport := &http.Transport{MaxIdleConnsPerHost: 16}
	proxy := http.HandlerFunc(func(w http.ResponseWriter, in *http.Request) {
		if strings.EqualFold(in.Header.Get("Upgrade"), "websocket") {
			g.relaySocket(w, in)
			return
		}
		body, err := io.ReadAll(in.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out, err := http.NewRequestWithContext(context.WithoutCancel(in.Context()), in.Method, base+in.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = in.Header.Clone()
		out.ContentLength = int64(len(body))
		res, err := transport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		what := in.Method + " " + in.URL.Path
		g.mu.Lock()
		g.exchanges++
		if d := res.Header.Get("X-Respgate-Dropped-Tools"); d != "" {
			g.dropped = append(g.dropped, d)
		}
		g.mu.Unlock()
		// Chat completions are not Open Responses objects (docs/chat-completions.md): relayed
		// unchecked. So is a stream resumed with starting_after: it begins mid-way, which the
		// whole-stream rules reject (the scripts compare it with the full replay, checked here).
		resumed := in.Method == http.MethodGet && in.URL.Query().Has("starting_after")
		if !strings.HasSuffix(in.URL.Path, "/chat/completions") && !resumed {
			g.schema.Wrap(res, what, func(what string, err error) {
				if err != nil {
					g.mu.Lock()
					g.violations = append(g.violations, "Open Responses: "+what+": "+err.Error())
					g.mu.Unlock()
				}
			})
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		rc := http.NewResponseController(w)
		var relayed bytes.Buffer // the whole body, for the canary check
		defer g.checkCanary(what, &relayed)
		buf := make([]byte, 32<<10)
		for {
			n, err := res.Body.Read(buf)
			if n > 0 {
				if g.canary != nil {
					relayed.Write(buf[:n])
				}
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(proxy)
	g.url = srv.URL + "/v1"
	return g, nil
}

// report records a checker's verdict on one exchange (nil: it conforms).
func (g *gateway) report(what string, err error) {
	if err == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.violations = append(g.violations, "Open Responses: "+what+": "+err.Error())
}

// checkCanary records a violation when a response body the proxy relayed contains the canary.
func (g *gateway) checkCanary(what string, body *bytes.Buffer) {
	if g.canary == nil || !bytes.Contains(body.Bytes(), g.canary) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.violations = append(g.violations, fmt.Sprintf("hidden reasoning: %s: the client received reasoning text (%q)", what, g.canary))
}

type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

var (
	children   []*exec.Cmd
	childrenMu sync.Mutex
)

func killAtExit(cmd *exec.Cmd) {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	children = append(children, cmd)
}

func killChildren() {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	for _, c := range children {
		if c.Process != nil {
			_ = c.Process.Kill()
		}
	}
}

// runNode runs one compat script against the default respgate and checks its exit code, its
// table rows and the checker's verdict on everything respgate sent it.
func runNode(t *testing.T, wantRows int, script string, args ...string) {
	t.Helper()
	runNodeOn(t, start(t), wantRows, script, args...)
}

func runNodeOn(t *testing.T, g *gateway, wantRows int, script string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+g.url, "OPENAI_API_KEY=compat-key", "RESPGATE_MODEL="+model)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	rows := parseRows(t, stdout.String())
	violations, _, exchanges := g.results()
	if err != nil {
		t.Errorf("node %s %s: %v\nstdout:\n%s\nstderr:\n%s\nrespgate log:\n%s", script, strings.Join(args, " "), err, stdout.String(), stderr.String(), tail(g))
	}
	if len(rows) != wantRows {
		t.Errorf("%d scenarios passed, want %d:\n%s", len(rows), wantRows, stdout.String())
	}
	checkConformance(t, violations, exchanges)
	for _, r := range rows {
		if len(violations) > 0 {
			r.Result = "fail (" + strings.SplitN(violations[0], ":", 2)[0] + ")"
		}
		record(r)
	}
}

func checkConformance(t *testing.T, violations []string, exchanges int) {
	t.Helper()
	if exchanges == 0 {
		t.Errorf("no request reached respgate")
	}
	for _, v := range violations {
		t.Error(v)
	}
}

func parseRows(t *testing.T, out string) []row {
	var rows []row
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "COMPAT ")
		if !ok {
			continue
		}
		var r row
		if err := json.Unmarshal([]byte(rest), &r); err != nil {
			t.Errorf("bad COMPAT line %q: %v", rest, err)
			continue
		}
		rows = append(rows, r)
	}
	return rows
}

func tail(g *gateway) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.logs.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

func TestOpenAINode7(t *testing.T) { runNode(t, 9, "openai-node.mjs", "openai") }

func TestOpenAINode6(t *testing.T) { runNode(t, 9, "openai-node.mjs", "openai-v6") }

func TestOpenAINodeChat(t *testing.T) { runNode(t, 2, "chat.mjs", "openai") }

func TestOpenAINode6Chat(t *testing.T) { runNode(t, 2, "chat.mjs", "openai-v6") }

func TestVercelAISDKChat(t *testing.T) { runNode(t, 2, "aisdk-chat.mjs") }

// TestAgentsCompactionSession: the Agents SDK's OpenAIResponsesCompactionSession over several runs,
// in both of its compaction modes.
func TestAgentsCompactionSession(t *testing.T) {
	runNodeOn(t, openAINamed.start(t), 2, "agents-compaction.mjs")
}

// TestVercelAISDKChatHiddenReasoning: the SDK never sees reasoning, so only the front door's
// replay can give step 2's model step 1's reasoning.
func TestVercelAISDKChatHiddenReasoning(t *testing.T) {
	runNodeOn(t, startHidden(t), 2, "aisdk-chat.mjs", "hidden")
}

func TestOpenAINode7HiddenReasoning(t *testing.T) {
	runNodeOn(t, startHidden(t), 2, "hidden.mjs", "openai")
}

func TestOpenAINode6HiddenReasoning(t *testing.T) {
	runNodeOn(t, startHidden(t), 2, "hidden.mjs", "openai-v6")
}

// TestOpenAINodeWebSocket: openai-node's ResponsesWS and its lane router over one socket (lanes,
// steering, a tool loop with steering pending, store:false), then a second socket that must be
// refused the first one's store:false response.
func TestOpenAINodeWebSocket(t *testing.T) {
	g := start(t)
	g.expectErrorEvents("previous_response_not_found")
	runNodeOn(t, g, 5, "ws.mjs")
	if n := g.socketCount(); n != 2 {
		t.Errorf("%d WebSocket connections, want 2", n)
	}
}

func TestAgentsSDK(t *testing.T) { runNode(t, 6, "agents.mjs") }

func TestVercelAISDK(t *testing.T) { runNode(t, 2, "aisdk.mjs") }

// TestOpenAIGo drives openai-go (the Go SDK respgate's end-to-end tests use everywhere) through
// the same checking proxy, so the table has its row: streaming with a tool and
// previous_response_id, GetStreaming (a GET with a JSON body {"stream":true}), and a conversation.
func TestOpenAIGo(t *testing.T) {
	g := start(t)
	defer func() {
		violations, _, exchanges := g.results()
		checkConformance(t, violations, exchanges)
	}()
	ver := openaiGoVersion()
	c := openai.NewClient(option.WithBaseURL(g.url), option.WithAPIKey("compat-key"), option.WithMaxRetries(0))
	ctx := t.Context()
	tool := `[{"type":"function","name":"get_weather","description":"weather","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}]`
	stream := func(body string) *responses.Response { return goStream(t, c, body, nil) }
	first := stream(`{"model":"` + model + `","input":"call get_weather for Bern","tools":` + tool + `,"stream":true}`)
	var callID string
	for _, it := range first.Output {
		if it.Type == "function_call" {
			callID = it.CallID
		}
	}
	if callID == "" {
		t.Fatalf("no function call: %s", first.RawJSON())
	}
	second := stream(fmt.Sprintf(`{"model":%q,"previous_response_id":%q,"tools":%s,"stream":true,"input":[{"type":"function_call_output","call_id":%q,"output":"fog"}]}`,
		model, first.ID, tool, callID))
	if !strings.Contains(second.OutputText(), "Tool said: fog") {
		t.Fatalf("answer: %s", second.OutputText())
	}
	record(row{Client: "openai-go " + ver, Mode: "stream", Tools: "function", Continuation: "previous_response_id", Scenario: "NewStreaming, tool call, output, answer", Result: "pass"})

	s := c.Responses.GetStreaming(ctx, second.ID, responses.ResponseGetParams{})
	n, done := 0, false
	for s.Next() {
		n++
		done = done || s.Current().Type == "response.completed"
	}
	if err := s.Err(); err != nil || !done {
		t.Fatalf("GetStreaming: %v after %d events", err, n)
	}
	s.Close()
	record(row{Client: "openai-go " + ver, Mode: "stream (GET replay)", Tools: "function", Continuation: "response_id", Scenario: "GetStreaming (GET with a JSON body)", Result: "pass"})

	conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Responses.New(ctx, goParams(fmt.Sprintf(`{"model":%q,"conversation":%q,"input":"remember: blue door"}`, model, conv.ID))); err != nil {
		t.Fatal(err)
	}
	r, err := c.Responses.New(ctx, goParams(fmt.Sprintf(`{"model":%q,"conversation":{"id":%q},"input":"which door?"}`, model, conv.ID)))
	if err != nil || !strings.Contains(r.OutputText(), "blue door") {
		t.Fatalf("conversation turn: %v %s", err, r.OutputText())
	}
	got, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != r.ID {
		t.Fatalf("get: %v", err)
	}
	record(row{Client: "openai-go " + ver, Mode: "non-stream", Tools: "none", Continuation: "conversation", Scenario: "Conversations.New, 2 turns, Responses.Get", Result: "pass"})
}

// TestOpenAIGoHiddenReasoning drives openai-go's NewStreaming against the respgate with
// --reasoning-exposure hidden: a stateless store:false session that sends each turn's output back
// (reasoning items with only respgate's encrypted_content), then GetStreaming. No event is a
// reasoning_text event, every reasoning item is hidden, the model's answers count the reasoning
// that reached it, and the proxy checks that "Thinking about" is in no byte the client got.
func TestOpenAIGoHiddenReasoning(t *testing.T) {
	g := startHidden(t)
	defer func() {
		violations, _, exchanges := g.results()
		checkConformance(t, violations, exchanges)
	}()
	c := openai.NewClient(option.WithBaseURL(g.url), option.WithAPIKey("compat-key"), option.WithMaxRetries(0))
	hidden := func(what string, ev responses.ResponseStreamEventUnion) {
		t.Helper()
		if strings.HasPrefix(ev.Type, "response.reasoning") || strings.Contains(ev.RawJSON(), "Thinking about") {
			t.Fatalf("%s: event shows reasoning: %s", what, ev.RawJSON())
		}
	}
	var history []json.RawMessage
	var seen []string
	var last *responses.Response
	for turn := 1; turn <= 3; turn++ {
		history = append(history, json.RawMessage(fmt.Sprintf(`{"role":"user","content":"question %d"}`, turn)))
		in, _ := json.Marshal(history)
		r := goStream(t, c, `{"model":"`+model+`","store":false,"stream":true,"input":`+string(in)+`}`, func(ev responses.ResponseStreamEventUnion) {
			hidden(fmt.Sprintf("turn %d", turn), ev)
		})
		m := seenReasoning.FindStringSubmatch(r.OutputText())
		if m == nil || m[1] != fmt.Sprint(turn-1) {
			t.Fatalf("turn %d: answer %q does not say it saw %d reasoning items", turn, r.OutputText(), turn-1)
		}
		seen = append(seen, m[1])
		for _, it := range r.Output {
			if it.Type == "reasoning" {
				rs := it.AsReasoning()
				if !strings.HasPrefix(rs.EncryptedContent, "rgr1.") || len(rs.Summary) != 0 || len(rs.Content) != 0 {
					t.Fatalf("turn %d: reasoning item %s", turn, it.RawJSON())
				}
			}
			history = append(history, json.RawMessage(it.RawJSON()))
		}
		last = r
	}
	next := goStream(t, c, `{"model":"`+model+`","stream":true,"input":"stored"}`, func(ev responses.ResponseStreamEventUnion) { hidden("stored turn", ev) })
	s := c.Responses.GetStreaming(t.Context(), next.ID, responses.ResponseGetParams{})
	done := false
	for s.Next() {
		hidden("GetStreaming", s.Current())
		done = done || s.Current().Type == "response.completed"
	}
	if err := s.Err(); err != nil || !done {
		t.Fatalf("GetStreaming: %v (completed %v)", err, done)
	}
	s.Close()
	t.Logf("last stateless answer: %q", last.OutputText())
	record(row{Client: "openai-go " + openaiGoVersion(), Mode: "stream (hidden reasoning) + GET replay", Tools: "none", Continuation: "full history, store:false",
		Scenario: "NewStreaming, 3 turns; reasoning items seen per turn: " + strings.Join(seen, ","), Result: "pass"})
}

// seenReasoning finds the simulator's count of the reasoning items that reached the model
// ("Seen <m> messages, <r> reasoning items, ...", upstream/vllmsim/doc.go).
var seenReasoning = regexp.MustCompile(`Seen \d+ messages, (\d+) reasoning items`)

// goStream runs one NewStreaming turn, passing each event to each (when set), and returns the
// response of its response.completed event.
func goStream(t *testing.T, c openai.Client, body string, each func(responses.ResponseStreamEventUnion)) *responses.Response {
	t.Helper()
	s := c.Responses.NewStreaming(t.Context(), goParams(body))
	defer s.Close()
	var final *responses.Response
	for s.Next() {
		ev := s.Current()
		if each != nil {
			each(ev)
		}
		if ev.Type == "response.completed" {
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil || final == nil {
		t.Fatalf("stream: %v (final %v)", err, final != nil)
	}
	return final
}

func goParams(body string) responses.ResponseNewParams {
	return param.Override[responses.ResponseNewParams](json.RawMessage(body))
}

// openaiGoVersion is the openai-go version go.mod requires.
func openaiGoVersion() string {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		return "v3"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/openai/openai-go/v3" {
			return f[1]
		}
	}
	return "v3"
}
