package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/internal/pgtest"
)

// goBinary is a command of this module built once per test process, on first use.
type goBinary struct {
	pkg, name string
	once      sync.Once
	path      string
	err       error
}

func (b *goBinary) get(t *testing.T) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", b.name+"-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, b.name)
		out, err := exec.Command("go", "build", "-o", b.path, b.pkg).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", b.name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var (
	respgateBin = &goBinary{pkg: "github.com/respgate/respgate/cmd/respgate", name: "respgate"}
	simBin      = &goBinary{pkg: "github.com/respgate/respgate/cmd/vllm-sim", name: "vllm-sim"}
)

// binary builds cmd/respgate once per test process.
func binary(t *testing.T) string { return respgateBin.get(t) }

// simBinary builds cmd/vllm-sim once per test process.
func simBinary(t *testing.T) string { return simBin.get(t) }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a running respgate binary.
type proc struct {
	cmd  *exec.Cmd
	url  string
	logs *strings.Builder
	mu   *sync.Mutex
}

func startBinary(t *testing.T, dbURL string, extra ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	// respgate refuses a --commit-timeout not less than --lease-ttl (docs/configuration.md).
	args := append([]string{"--listen", addr, "--database-url", dbURL, "--lease-ttl", "2s", "--write-timeout", "1s", "--commit-timeout", "1500ms",
		"--sweep-interval", "300ms"}, extra...)
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "RESPGATE_UPSTREAM_URL=")
	stderr, _ := cmd.StderrPipe()
	p := &proc{cmd: cmd, url: "http://" + addr, logs: &strings.Builder{}, mu: &sync.Mutex{}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// A start runs both migrations under their database-wide locks, which every other test
	// package's stores take too: under a full make test it can wait its turn for a while.
	waitFor(t, time.Minute, "respgate /readyz", func() bool {
		res, err := http.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	}, p.log)
	return p
}

func (p *proc) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(p.url+"/v1"), option.WithAPIKey("proc-key"), option.WithMaxRetries(0))
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func dbURLs(t *testing.T) map[string]string {
	return map[string]string{
		"postgres": pgtest.DSN(t),
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "data", "respgate.db"),
	}
}

func TestKill9MidStreamThenRestartEndsTerminalAndKeepsData(t *testing.T) {
	for name, db := range dbURLs(t) {
		t.Run(name, func(t *testing.T) {
			p := startBinary(t, db)
			c := p.client()
			done := createWith(t, c, `{"model":"`+harmony+`","input":"remember: the code word is heron"}`)

			// Start a slow stream and kill the process with SIGKILL once it is under way.
			req, _ := http.NewRequest("POST", p.url+"/v1/responses",
				strings.NewReader(`{"model":"`+harmony+`?delay_ms=100&tokens=300","input":"hi","stream":true}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer proc-key")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(res.Body)
			id := ""
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "data: ") {
					var ev struct {
						Type     string
						Response struct{ ID string }
					}
					_ = json.Unmarshal([]byte(line[6:]), &ev)
					if id == "" {
						id = ev.Response.ID
					}
					if strings.HasSuffix(ev.Type, ".delta") {
						break
					}
				}
			}
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = p.cmd.Wait()
			res.Body.Close()

			// Restart on the same database: the sweeper ends the response failed, and the old
			// response is readable and continuable.
			p2 := startBinary(t, db)
			c2 := p2.client()
			var got *responses.Response
			waitFor(t, 10*time.Second, "sweeper to fail the killed response", func() bool {
				got, err = c2.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
				return err == nil && got.Status == "failed"
			})
			if got.Error.Code != "server_error" || !strings.Contains(got.Error.Message, "lease expired") {
				t.Fatalf("swept response error: %+v", got.Error)
			}
			if len(got.Output) != 0 {
				t.Fatalf("a killed turn left %d half-written output items", len(got.Output))
			}
			// The killed turn's input was stored with its in-progress record: it is listed, and a
			// continuation from the failed response replays it.
			items, err := c2.Responses.InputItems.List(context.Background(), id, responses.InputItemListParams{})
			if err != nil || len(items.Data) != 1 || !strings.Contains(items.Data[0].RawJSON(), `"hi"`) {
				t.Fatalf("input of the killed turn: %v %+v", err, items)
			}
			next := createWith(t, c2, `{"model":"`+harmony+`","input":"what was it?","previous_response_id":"`+done.ID+`"}`)
			if !strings.Contains(next.OutputText(), "heron") {
				t.Fatalf("continuing after restart lost history: %s", next.OutputText())
			}
			if strings.Contains(p.log()+p2.log(), "heron") {
				t.Fatalf("prompt text reached the logs")
			}
		})
	}
}

func createWith(t *testing.T, c openai.Client, body string) *responses.Response {
	t.Helper()
	r, err := c.Responses.New(t.Context(), params(body))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return r
}

func TestSIGTERMDrainsInFlightStreams(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "respgate.db")
	p := startBinary(t, db, "--shutdown-timeout", "10s")
	c := p.client()
	s := c.Responses.NewStreaming(t.Context(), params(`{"model":"`+harmony+`?delay_ms=20&tokens=60","input":"hi","stream":true}`))
	if !s.Next() {
		t.Fatalf("no first event: %v", s.Err())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var last string
	for s.Next() {
		last = s.Current().Type
	}
	if last != "response.completed" {
		t.Fatalf("stream in flight at SIGTERM ended with %q, want response.completed", last)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("respgate did not exit 0 after SIGTERM: %v", err)
	}
	// A clean shutdown ends with "respgate stopped", and River stops within the drain: it
	// never logs a hard stop, which reads like an error (issue 42, the first hour).
	waitFor(t, 10*time.Second, "the last log line", func() bool { return strings.Contains(p.log(), `"msg":"respgate stopped"`) }, p.log)
	lines := strings.Split(strings.TrimSpace(p.log()), "\n")
	if strings.Contains(p.log(), "Hard stop") || !strings.Contains(lines[len(lines)-1], `"msg":"respgate stopped"`) {
		t.Errorf("shutdown log ends:\n%s", strings.Join(lines[max(0, len(lines)-4):], "\n"))
	}
}

func TestSIGTERMWithAHundredStreamsEndsEveryOneTerminal(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "respgate.db")
	// The drain deadline is 150 times the short streams' own length, so that they finish within it
	// on a loaded machine too (at 5 s, 10 of 50 did not, once, in CI); the long ones run twice past it.
	p := startBinary(t, db, "--shutdown-timeout", "15s")
	type result struct {
		id, last string
	}
	results := make(chan result, 100)
	started := make(chan struct{}, 100)
	for i := 0; i < 100; i++ {
		// Half finish within the drain deadline, half run far past it.
		model := harmony + "?delay_ms=5&tokens=20"
		if i%2 == 1 {
			model = harmony + "?delay_ms=50&tokens=600"
		}
		go func() {
			c := p.client()
			s := c.Responses.NewStreaming(context.Background(), params(`{"model":"`+model+`","input":"hi","stream":true}`))
			defer s.Close()
			var r result
			for s.Next() {
				ev := s.Current()
				if r.id == "" {
					r.id = ev.Response.ID
					started <- struct{}{}
				}
				r.last = ev.Type
			}
			if r.id == "" {
				started <- struct{}{}
			}
			results <- r
		}()
	}
	for i := 0; i < 100; i++ {
		<-started
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for i := 0; i < 100; i++ {
		r := <-results
		if r.id == "" {
			t.Fatalf("a stream never started")
		}
		if r.last != "response.completed" && r.last != "response.failed" {
			t.Errorf("stream %s ended with %q, not a terminal event", r.id, r.last)
		}
		ids[r.id] = r.last
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("respgate did not exit 0: %v", err)
	}
	// Every stored response is terminal, with the status its client was told.
	p2 := startBinary(t, db)
	c := p2.client()
	completed := 0
	for id, last := range ids {
		r, err := c.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if "response."+string(r.Status) != last {
			t.Errorf("%s stored %s, client saw %s", id, r.Status, last)
		}
		if r.Status == "completed" {
			completed++
		}
	}
	if completed < 50 {
		t.Errorf("only %d streams completed within the drain deadline, want the 50 short ones", completed)
	}
	t.Logf("SIGTERM with 100 streams: %d completed in the drain, %d ended failed at the deadline", completed, 100-completed)
}
