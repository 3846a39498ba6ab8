package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// startSimProcess runs a vllm-sim process with args and returns its /v1 base URL once it answers
// /health.
func startSimProcess(t *testing.T, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(simBinary(t), append([]string{"--listen", addr}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, 30*time.Second, "vllm-sim /health", func() bool {
		res, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return "http://" + addr + "/v1"
}

// A fleet replica that answers 200 and then fails before its first event (vLLM's generation-error
// frame, or the connection cut) has sent the client nothing: respgate retries the turn on the
// next replica, so every streamed turn completes and is stored completed, on both backends, with
// real simulator processes behind a real respgate (docs/fleet.md, "Health and failover"). Kills:
// a fleet that hands such a stream to the turn (the turns whose first choice is the bad replica
// end response.failed).
func TestFleetRetriesAStreamThatFailedBeforeItsFirstEvent(t *testing.T) {
	for _, fault := range []string{"error_after=0", "cut_after=0"} {
		for name, db := range dbURLs(t) {
			t.Run(fault+"/"+name, func(t *testing.T) {
				bad := startSimProcess(t, "--fault", fault)
				good := startSimProcess(t)
				file := filepath.Join(t.TempDir(), "upstreams.yaml")
				yaml := "pools:\n  - name: sim\n    urls: [" + bad + ", " + good + "]\n    models: [\"openai/*\"]\n" +
					"health:\n  interval: 100ms\n  min_backoff: 50ms\n  max_backoff: 100ms\n"
				if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
					t.Fatal(err)
				}
				p := startBinary(t, db, "--upstreams", file)
				c := p.client()
				// Each opening's key picks the bad replica first with probability ½ (the replica
				// ids carry the processes' random ports): with 8 turns none did 1 run in 256, and
				// the failover this test needs never happened; with 32, 1 in 4·10⁹.
				for i := range 32 {
					stream := c.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
						Model: harmony,
						Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("opening number %d", i))},
					})
					var last responses.ResponseStreamEventUnion
					for stream.Next() {
						last = stream.Current()
					}
					if err := stream.Err(); err != nil {
						t.Fatalf("turn %d: %v", i, err)
					}
					if last.Type != "response.completed" {
						t.Fatalf("turn %d ended %s (%s), want response.completed", i, last.Type, last.Response.Error.Message)
					}
					got, err := c.Responses.Get(t.Context(), last.Response.ID, responses.ResponseGetParams{})
					if err != nil || got.Status != responses.ResponseStatusCompleted {
						t.Fatalf("turn %d stored: %v, %v", i, got.Status, err)
					}
				}
				res, err := http.Get(p.url + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				metrics, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if !strings.Contains(string(metrics), "respgate_upstream_pool_failovers_total") {
					t.Errorf("no failover counted: no turn met the bad replica first?\n%s", p.log())
				}
			})
		}
	}
}
