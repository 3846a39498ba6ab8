package fleet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if simDir != "" {
		_ = os.RemoveAll(simDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	simOnce sync.Once
	simDir  string
	simBin  string
	simErr  error
)

// simBinary builds cmd/vllm-sim once per test process: the end-to-end tests run real
// simulator processes, which a test can kill and restart.
func simBinary(t *testing.T) string {
	t.Helper()
	simOnce.Do(func() {
		if simDir, simErr = os.MkdirTemp("", "fleet-sim-"); simErr != nil {
			return
		}
		simBin = filepath.Join(simDir, "vllm-sim")
		out, err := exec.Command("go", "build", "-o", simBin, "github.com/respgate/respgate/cmd/vllm-sim").CombinedOutput()
		if err != nil {
			simErr = fmt.Errorf("go build vllm-sim: %v\n%s", err, out)
		}
	})
	if simErr != nil {
		t.Fatal(simErr)
	}
	return simBin
}

// simProc is one running vllm-sim process.
type simProc struct {
	cmd   *exec.Cmd
	addrs []string // one per instance
	done  chan struct{}
}

// startSim runs vllm-sim with args and returns once every instance listens (its log line says
// so: no polling).
func startSim(t *testing.T, listen string, instances int, args ...string) *simProc {
	t.Helper()
	cmd := exec.Command(simBinary(t), append([]string{"--listen", listen, "--instances", fmt.Sprint(instances), "--shutdown-timeout", "1s"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &simProc{cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, instances)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "vllm-sim listening" {
				ready <- line.Addr
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(p.kill)
	for range instances {
		select {
		case a := <-ready:
			p.addrs = append(p.addrs, a)
		case <-p.done:
			t.Fatal("vllm-sim exited before listening")
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
	return p
}

// kill stops the process at once (a crashed replica) and waits for it.
func (p *simProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *simProc) url(i int) string { return "http://" + p.addrs[i] + "/v1" }

// healthEvents collects OnHealth calls so a test can wait for a replica's change.
type healthEvents struct {
	ch chan string // "up <id>" / "down <id>"
}

func newHealthEvents() *healthEvents { return &healthEvents{ch: make(chan string, 256)} }

func (h *healthEvents) on(id string, healthy bool) {
	s := "down " + id
	if healthy {
		s = "up " + id
	}
	select {
	case h.ch <- s:
	default:
	}
}

// wait returns once want was seen, failing the test if it ends first.
func (h *healthEvents) wait(t *testing.T, want string) {
	t.Helper()
	for {
		select {
		case got := <-h.ch:
			if got == want {
				return
			}
		case <-t.Context().Done():
			t.Fatalf("never saw %q", want)
		}
	}
}

// fastHealth probes often, so a test waits little for the events it waits on.
var fastHealth = Health{Interval: 100 * time.Millisecond, Timeout: time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Fall: 1}

func newFleet(t *testing.T, top Topology, mod func(*Config)) *Fleet {
	t.Helper()
	cfg := Config{Topology: top, Client: upstream.Config{ConnectTimeout: 5 * time.Second}}
	if mod != nil {
		mod(&cfg)
	}
	f, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

const streamBody = `{"model":"openai/gpt-oss-sim","input":"hello there","stream":true}`
const createBody = `{"model":"openai/gpt-oss-sim","input":"hello there","stream":false}`

// drain reads a stream to its end and closes it.
func drain(t *testing.T, s *upstream.Stream) {
	t.Helper()
	defer s.Close()
	for _, err := range s.Events() {
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	}
}

// keyFirstOn finds a routing key whose rendezvous first choice is ids[want].
func keyFirstOn(ids []string, want int) string {
	for k := 0; ; k++ {
		key := fmt.Sprint("chain-", k)
		if Rendezvous(key, ids)[0] == want {
			return key
		}
	}
}

func TestFailoverBeforeTheFirstByteAndRecovery(t *testing.T) {
	procs := []*simProc{startSim(t, "127.0.0.1:0", 1), startSim(t, "127.0.0.1:0", 1), startSim(t, "127.0.0.1:0", 1)}
	urls := []string{procs[0].url(0), procs[1].url(0), procs[2].url(0)}
	ids := []string{ReplicaID(urls[0]), ReplicaID(urls[1]), ReplicaID(urls[2])}
	ev := newHealthEvents()
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: urls}}, Health: fastHealth}, func(c *Config) { c.OnHealth = ev.on })
	key := keyFirstOn(ids, 0)
	order := Rendezvous(key, ids)
	rt := upstream.Route{Model: vllmsim.HarmonyModel, Key: key}

	// Healthy: the key's first choice answers, and the chain is at home.
	_, got, err := f.Create(t.Context(), rt, []byte(createBody))
	if want := (upstream.Served{Replica: ids[0]}); err != nil || got != want {
		t.Fatalf("create: %+v, %v; want %+v", got, err, want)
	}

	// The first choice dies: the call goes to the next replica in the key's order, which leaves
	// the chain away from its first choice, and the lent body is released once, after the last
	// attempt.
	procs[0].kill()
	var released atomic.Int32
	s, got, err := f.StreamLent(t.Context(), rt, []byte(streamBody), func() { released.Add(1) })
	if err != nil {
		t.Fatalf("stream after the kill: %v", err)
	}
	if want := (upstream.Served{Replica: ids[order[1]], Away: true}); got != want {
		t.Errorf("failover to %+v, want %+v (the key's next replica, away)", got, want)
	}
	drain(t, s)
	if n := released.Load(); n != 1 {
		t.Errorf("release called %d times, want 1", n)
	}
	ev.wait(t, "down "+ids[0])

	// While it is down, calls skip it without trying, also the chain's next turn, which
	// prefers the replica of its last turn; the chain stays away.
	away := upstream.Route{Model: vllmsim.HarmonyModel, Key: key, Prefer: ids[order[1]], Away: true}
	if _, got, err = f.Create(t.Context(), away, []byte(createBody)); err != nil || got != (upstream.Served{Replica: ids[order[1]], Away: true}) {
		t.Errorf("create while down: %+v, %v", got, err)
	}

	// It comes back at the same address: the probes see it, and the key returns to it, also a
	// turn preferring the replica of its last turn, which ran while the first choice was down
	// (away: the chain left it for that); a chain that left it for the load bound stays.
	procs[0] = startSim(t, procs[0].addrs[0], 1)
	ev.wait(t, "up "+ids[0])
	if _, got, err = f.Create(t.Context(), rt, []byte(createBody)); err != nil || got != (upstream.Served{Replica: ids[0]}) {
		t.Errorf("after recovery: %+v, %v; want %s", got, err, ids[0])
	}
	if _, got, err = f.Create(t.Context(), away, []byte(createBody)); err != nil || got != (upstream.Served{Replica: ids[0]}) {
		t.Errorf("the continuation of an away chain: %+v, %v; want %s, home", got, err, ids[0])
	}
	spilled := upstream.Route{Model: vllmsim.HarmonyModel, Key: key, Prefer: ids[order[1]]}
	if _, got, err = f.Create(t.Context(), spilled, []byte(createBody)); err != nil || got != (upstream.Served{Replica: ids[order[1]]}) {
		t.Errorf("the continuation of a spilled chain: %+v, %v; want %s, not away", got, err, ids[order[1]])
	}
}

func TestEveryReplicaDownIs503WithRetryAfter(t *testing.T) {
	a, b := startSim(t, "127.0.0.1:0", 1), startSim(t, "127.0.0.1:0", 1)
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: []string{a.url(0), b.url(0)}, Models: []string{"openai/*"}}}, Health: fastHealth}, nil)
	a.kill()
	b.kill()
	var released atomic.Int32
	_, _, err := f.StreamLent(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel, Key: "k"}, []byte(streamBody), func() { released.Add(1) })
	var e *upstream.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v", err)
	}
	ae := e.APIError()
	if ae.Status != http.StatusServiceUnavailable || ae.Code != "upstream_unavailable" || ae.RetryAfter == "" {
		t.Errorf("envelope %+v, want 503 upstream_unavailable with Retry-After", ae)
	}
	if n := released.Load(); n != 1 {
		t.Errorf("release called %d times, want 1", n)
	}
	// Now that both are marked down, a call fails at once the same way, releasing the body.
	_, _, err = f.StreamLent(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel}, []byte(streamBody), func() { released.Add(1) })
	if !errors.As(err, &e) || e.APIError().Status != http.StatusServiceUnavailable || released.Load() != 2 {
		t.Errorf("second call: %v, released %d", err, released.Load())
	}
}

func TestModelNoPoolServesIs404ModelNotFound(t *testing.T) {
	a := startSim(t, "127.0.0.1:0", 1)
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: []string{a.url(0)}}}, Health: fastHealth}, nil)
	_, _, err := f.Create(t.Context(), upstream.Route{Model: "nobody/serves-this"}, []byte(createBody))
	var e *upstream.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v", err)
	}
	if ae := e.APIError(); ae.Status != http.StatusNotFound || ae.Code != "model_not_found" || ae.Param != "model" {
		t.Errorf("envelope %+v, want 404 model_not_found", ae)
	}
}

func TestModelsAggregatesThePools(t *testing.T) {
	two := startSim(t, "127.0.0.1:0", 2, "--max-model-len", "4096")
	other := startSim(t, "127.0.0.1:0", 1, "--max-model-len", "2048")
	f := newFleet(t, Topology{Pools: []Pool{
		{Name: "a", URLs: []string{two.url(0), two.url(1)}},
		{Name: "b", URLs: []string{other.url(0)}, Models: []string{"openai/*", "extra/model"}},
	}, Health: fastHealth}, nil)
	raw, err := f.Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	got := map[string]int{}
	for _, m := range list.Data {
		if _, dup := got[m.ID]; dup {
			t.Errorf("model %s listed twice", m.ID)
		}
		got[m.ID] = m.MaxModelLen
	}
	want := map[string]int{vllmsim.HarmonyModel: 2048, vllmsim.ParserModel: 4096, "extra/model": 0}
	if list.Object != "list" || len(got) != len(want) {
		t.Fatalf("models %v, want %v", got, want)
	}
	for id, n := range want {
		if got[id] != n {
			t.Errorf("%s: max_model_len %d, want %d (the smallest its replicas report)", id, got[id], n)
		}
	}
	// The harmony model routes to pool a (first in the file); the literal name to pool b.
	if _, r, err := f.Create(t.Context(), upstream.Route{Model: vllmsim.ParserModel}, []byte(`{"model":"Qwen/Qwen3-sim","input":"hi"}`)); err != nil || !strings.HasPrefix(r.Replica, "http://"+strings.Split(two.addrs[0], ":")[0]) {
		t.Errorf("parser model: %+v, %v", r, err)
	}
}

func TestAffinityHeaderCarriesAnHMACOfTheKey(t *testing.T) {
	a := startSim(t, "127.0.0.1:0", 1)
	secret := []byte("affinity-secret")
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: []string{a.url(0)}, Models: []string{"*"}}}, Health: fastHealth}, func(c *Config) {
		c.AffinityHeader, c.AffinitySecret = "X-Session-Id", secret
	})
	key := Key(KeyParams{Tenant: "t", LineageRoot: "resp_root"})
	if _, _, err := f.Create(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel, Key: key}, []byte(createBody)); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+a.addrs[0]+"/sim/requests", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var log []struct {
		Path   string              `json:"path"`
		Header map[string][]string `json:"header"`
	}
	if err := json.NewDecoder(res.Body).Decode(&log); err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, r := range log {
		if r.Path != "/v1/responses" {
			continue
		}
		seen = true
		got := strings.Join(r.Header["X-Session-Id"], ",")
		if got != AffinityValue(secret, key) || strings.Contains(got, key) || strings.Contains(got, "resp_root") {
			t.Errorf("header %q, want the HMAC %q", got, AffinityValue(secret, key))
		}
	}
	if !seen {
		t.Fatal("the call never reached the simulator")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestStreamsCountInFlightUntilTheyEnd(t *testing.T) {
	a := startSim(t, "127.0.0.1:0", 1)
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: []string{a.url(0)}}}, Health: fastHealth}, nil)
	r := f.gen.Load().pools[0].replicas[0]
	s, _, err := f.StreamLent(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel}, []byte(streamBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.inFlight.Load(); n != 1 {
		t.Errorf("in flight while streaming: %d", n)
	}
	drain(t, s)
	if n := r.inFlight.Load(); n != 0 {
		t.Errorf("in flight after the stream: %d", n)
	}
}

func TestReloadDrainsRemovedReplicas(t *testing.T) {
	a, b := startSim(t, "127.0.0.1:0", 1, "--fault", "delay_ms=5"), startSim(t, "127.0.0.1:0", 1)
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: []string{a.url(0)}}}, Health: fastHealth}, nil)
	// A stream runs on a; the reload removes a and adds b.
	s, got, err := f.StreamLent(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel}, []byte(streamBody), nil)
	if err != nil || got.Replica != ReplicaID(a.url(0)) {
		t.Fatalf("stream on a: %+v, %v", got, err)
	}
	if err := f.Reload(t.Context(), Topology{Pools: []Pool{{Name: "p", URLs: []string{b.url(0)}}}, Health: fastHealth}); err != nil {
		t.Fatal(err)
	}
	if _, got, err := f.Create(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel}, []byte(createBody)); err != nil || got.Replica != ReplicaID(b.url(0)) {
		t.Errorf("after reload: %+v, %v; want b", got, err)
	}
	// The running stream finishes on a.
	drain(t, s)
}

// Every respgate replica routes a chain to the same vLLM replica given the same healthy set,
// and a chain's turns keep hitting the replica's prefix cache.
func TestTwoFleetsAgreeAndChainsHitTheCache(t *testing.T) {
	sims := startSim(t, "127.0.0.1:0", 3, "--prefix-cache-blocks", "4096")
	urls := []string{sims.url(0), sims.url(1), sims.url(2)}
	top := Topology{Pools: []Pool{{Name: "p", URLs: urls, Models: []string{"*"}}}, Health: fastHealth}
	f1 := newFleet(t, top, nil)
	rev := append([]string(nil), urls...)
	rev[0], rev[2] = rev[2], rev[0]
	f2 := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: rev, Models: []string{"*"}}}, Health: fastHealth}, nil)
	words := strings.Repeat("alpha beta gamma delta ", 20)
	for c := range 6 {
		key := fmt.Sprint("chain-", c)
		input := `{"role":"user","content":"` + words + fmt.Sprint(c) + `"}`
		var first string
		for turn := range 3 {
			fl := f1
			if turn%2 == 1 {
				fl = f2
			}
			body := `{"model":"openai/gpt-oss-sim","input":[` + input + `]}`
			raw, got, err := fl.Create(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel, Key: key}, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if turn == 0 {
				first = got.Replica
			} else if got.Replica != first {
				t.Fatalf("chain %d turn %d on %s, turn 0 on %s", c, turn, got.Replica, first)
			}
			var resp struct {
				Usage struct {
					InputTokensDetails struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"input_tokens_details"`
				} `json:"usage"`
			}
			_ = json.Unmarshal(raw, &resp)
			if turn > 0 && resp.Usage.InputTokensDetails.CachedTokens == 0 {
				t.Errorf("chain %d turn %d: nothing cached", c, turn)
			}
			input += `,{"role":"assistant","content":[{"type":"output_text","text":"noted"}]},{"role":"user","content":"and more ` + fmt.Sprint(turn) + `"}`
		}
	}
}

// A replica that answers 200 and then fails before its first event (vLLM's generation-error
// frame, a connection cut before or inside the first frame, a silence past the idle timeout)
// has sent nothing the client could see: the stream goes to the key's next replica, and the
// failed one is marked down. Kills: a fleet that hands the turn such a stream (no Peek), and a
// Peek that consumes the first event (the stream that is handed on must be whole).
func TestStreamFailingBeforeItsFirstEventFailsOver(t *testing.T) {
	for _, fault := range []string{"error_after=0", "cut_after=0", "cut_inside=0", "stall=30s"} {
		t.Run(fault, func(t *testing.T) {
			bad, good := startSim(t, "127.0.0.1:0", 1, "--fault", fault), startSim(t, "127.0.0.1:0", 1)
			urls := []string{bad.url(0), good.url(0)}
			ids := []string{ReplicaID(urls[0]), ReplicaID(urls[1])}
			ev := newHealthEvents()
			f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: urls}}, Health: Health{Interval: time.Hour}}, func(c *Config) {
				c.OnHealth = ev.on
				c.Client.IdleTimeout = 300 * time.Millisecond
			})
			var released atomic.Int32
			first := make(chan struct{})
			s, got, err := f.StreamLent(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel, Key: keyFirstOn(ids, 0)},
				[]byte(streamBody), func() {
					if released.Add(1) == 1 {
						close(first)
					}
				})
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if want := (upstream.Served{Replica: ids[1], Away: true}); got != want {
				t.Errorf("served %+v, want the next replica, away from the failed first choice: %+v", got, want)
			}
			var types []string
			for e, err := range s.Events() {
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("the stream handed on: %v", err)
				}
				types = append(types, string(e.Type))
			}
			_ = s.Close()
			if len(types) < 2 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
				t.Errorf("events %v, want the whole stream from response.created to response.completed", types)
			}
			// The transport gives the body back when it is done with it, which may come after
			// the stream has ended: wait for that event (a minute only guards against a hang).
			select {
			case <-first:
			case <-time.After(time.Minute):
			}
			if n := released.Load(); n != 1 {
				t.Errorf("release called %d times, want 1", n)
			}
			ev.wait(t, "down "+ids[0])
		})
	}
}

// A stream whose first event is an ordinary one is handed on whole, and one that fails after it
// is not retried: the turn reads the failure in-band (bytes may have reached the client).
func TestStreamFailingAfterItsFirstEventIsNotRetried(t *testing.T) {
	bad, good := startSim(t, "127.0.0.1:0", 1, "--fault", "error_after=2"), startSim(t, "127.0.0.1:0", 1)
	urls := []string{bad.url(0), good.url(0)}
	ids := []string{ReplicaID(urls[0]), ReplicaID(urls[1])}
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: urls}}, Health: Health{Interval: time.Hour}}, nil)
	s, got, err := f.StreamLent(t.Context(), upstream.Route{Model: vllmsim.HarmonyModel, Key: keyFirstOn(ids, 0)}, []byte(streamBody), nil)
	if err != nil || got != (upstream.Served{Replica: ids[0]}) {
		t.Fatalf("stream: %+v, %v; want the first choice %s", got, err, ids[0])
	}
	defer s.Close()
	n, sawError := 0, false
	for e, err := range s.Events() {
		if err != nil {
			break
		}
		if e.Type == "error" {
			sawError = s.EventError(e.Data).Status == http.StatusInternalServerError
			break
		}
		n++
	}
	if n != 2 || !sawError {
		t.Errorf("%d events, then the generation error: %v; want 2 events, then the error in-band", n, sawError)
	}
}
