//go:build compat && codex

package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCodexCLI runs Codex CLI's `codex exec` against respgate for two turns of one session, with
// respgate as a custom model provider (wire_api = "responses"). Codex sends store:false, the full
// history every turn (reasoning items verbatim, its own msg_/fco_ ids), client_metadata, and tools
// of types function, namespace and web_search:
//
//   - turn 1 asks for exec_command (a function tool): Codex runs the shell command and sends its
//     output back; the model's answer quotes it;
//   - turn 2 (`codex exec resume --last`) asks for multi_agent_v1__close_agent: a function tool
//     inside Codex's multi_agent_v1 namespace tool, which respgate flattened for vLLM; Codex can
//     only dispatch the call if respgate names it {"namespace":"multi_agent_v1","name":
//     "close_agent"} again, and its (error) output must reach the model.
//
// The web_search tool is dropped under respgate's default tool policy, with the
// X-Respgate-Dropped-Tools header.
//
// Built only with the codex tag (make compat): the @openai/codex package carries a ~400 MB
// platform binary, so CI does not install it.
func TestCodexCLI(t *testing.T) {
	g := start(t)
	s := codexSession(t, g)
	violations, dropped, exchanges := g.results()
	checkConformance(t, violations, exchanges)
	if len(dropped) == 0 || !strings.Contains(strings.Join(dropped, ","), "web_search") {
		t.Errorf("X-Respgate-Dropped-Tools seen: %v, want web_search", dropped)
	}
	result := "pass"
	if t.Failed() {
		result = "fail"
	}
	record(row{Client: "codex-cli " + s.version, Mode: "stream", Tools: "function + namespace (flattened) + web_search (dropped)",
		Continuation: "full history, store:false (exec + exec resume)", Scenario: "2 turns: exec_command, multi_agent_v1.close_agent", Result: result})
}

// TestCodexCLIWebSocket runs the same session with the provider's supports_websockets = true:
// Codex then sends every turn as a response.create message on one WebSocket (GET /v1/responses)
// instead of a POST, with "stream":true in it (accepted as a no-op, docs/clients.md). The proxy
// relays the socket and checks every turn's messages as one Open Responses event stream.
func TestCodexCLIWebSocket(t *testing.T) {
	g := start(t)
	s := codexSession(t, g, "supports_websockets = true")
	violations, _, exchanges := g.results()
	checkConformance(t, violations, exchanges)
	if n := g.socketCount(); n == 0 {
		t.Errorf("Codex opened no WebSocket: it used HTTP")
	}
	result := "pass"
	if t.Failed() {
		result = "fail"
	}
	record(row{Client: "codex-cli " + s.version, Mode: fmt.Sprintf("WebSocket (%d connections, %d turns)", g.socketCount(), exchanges), Tools: "function + namespace (flattened)",
		Continuation: "full history, store:false (exec + exec resume)", Scenario: "2 turns: exec_command, multi_agent_v1.close_agent", Result: result})
}

// TestCodexCLIHiddenReasoning runs the same session against the respgate with
// --reasoning-exposure hidden: Codex gets reasoning items with only respgate's encrypted_content
// and sends them back in its full history (store:false), so the model still sees every earlier
// reasoning item; the canary of the model's reasoning is in no byte Codex received (the proxy
// checks) nor in anything Codex printed.
func TestCodexCLIHiddenReasoning(t *testing.T) {
	g := startHidden(t)
	s := codexSession(t, g)
	// Turn 1 made two model calls (the exec_command call, then the answer), so turn 2's first call
	// carries 2 reasoning items and its second (after the close_agent output) 3.
	if m := seenReasoning.FindStringSubmatch(s.answer); m == nil || m[1] != "3" {
		t.Errorf("turn 2 answer %q: want 3 reasoning items seen", s.answer)
	}
	if bytes.Contains(s.printed, []byte(hiddenReasoning.canary)) {
		t.Errorf("codex printed the model's reasoning:\n%s", s.printed)
	}
	violations, _, exchanges := g.results()
	checkConformance(t, violations, exchanges)
	result := "pass"
	if t.Failed() {
		result = "fail"
	}
	record(row{Client: "codex-cli " + s.version, Mode: "stream (hidden reasoning)", Tools: "function + namespace (flattened)",
		Continuation: "full history, store:false (exec + exec resume)", Scenario: "2 turns; reasoning items seen by the last call: 3", Result: result})
}

// codexRun is what a two-turn Codex session showed: the version, turn 2's answer and everything
// Codex printed.
type codexRun struct {
	version, answer string
	printed         []byte
}

// codexSession runs `codex exec` (an exec_command call Codex executes) then `codex exec resume
// --last` (a namespaced tool's call) against g and checks both turns.
func codexSession(t *testing.T, g *gateway, extraProviderConfig ...string) codexRun {
	t.Helper()
	var run codexRun
	bin, err := filepath.Abs("codex/node_modules/.bin/codex")
	if err != nil {
		t.Fatal(err)
	}
	home, work := t.TempDir(), t.TempDir()
	config := `model = "` + model + `"
model_provider = "respgate"

[model_providers.respgate]
name = "respgate"
base_url = "` + g.url + `"
env_key = "RESPGATE_API_KEY"
wire_api = "responses"
` + strings.Join(extraProviderConfig, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	codex := func(args ...string) []map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		// danger-full-access: Codex's own sandbox (landlock/seccomp) is not available in every
		// container; the only command the simulated model asks for is an echo.
		cmd := exec.CommandContext(ctx, bin, append([]string{"exec", "--skip-git-repo-check", "-s", "danger-full-access", "--json"}, args...)...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "RESPGATE_API_KEY=compat-key", "NO_COLOR=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		run.printed = append(append(run.printed, stdout.Bytes()...), stderr.Bytes()...)
		if err != nil {
			t.Fatalf("codex %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		if strings.Contains(stderr.String(), "unsupported call") {
			t.Errorf("codex could not dispatch a call:\n%s", stderr.String())
		}
		var events []map[string]any
		sc := bufio.NewScanner(&stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events = append(events, ev)
			}
		}
		for _, ev := range events {
			if ev["type"] == "turn.failed" || ev["type"] == "error" {
				t.Fatalf("codex %s: %v\n%s", strings.Join(args, " "), ev, stdout.String())
			}
		}
		return events
	}
	items := func(events []map[string]any, typ string) []map[string]any {
		var out []map[string]any
		for _, ev := range events {
			if ev["type"] != "item.completed" {
				continue
			}
			if it, ok := ev["item"].(map[string]any); ok && it["type"] == typ {
				out = append(out, it)
			}
		}
		return out
	}
	run.version = "0.171.0"
	if b, err := os.ReadFile("codex/node_modules/@openai/codex/package.json"); err == nil {
		var p struct{ Version string }
		if json.Unmarshal(b, &p) == nil {
			run.version = p.Version
		}
	}

	// Turn 1: a function tool call Codex executes.
	ev := codex("echo compat-ok; call exec_command")
	cmds := items(ev, "command_execution")
	if len(cmds) != 1 || !strings.Contains(cmds[0]["aggregated_output"].(string), "compat-ok") {
		t.Fatalf("turn 1: want one command run printing compat-ok, got %v", cmds)
	}
	msgs := items(ev, "agent_message")
	if len(msgs) != 1 || !strings.Contains(msgs[0]["text"].(string), "Tool said:") || !strings.Contains(msgs[0]["text"].(string), "compat-ok") {
		t.Fatalf("turn 1: the answer does not quote the tool output: %v", msgs)
	}

	// Turn 2: the same session (full history resent, store:false), a namespaced tool's call.
	ev = codex("resume", "--last", "remember: turn two. call multi_agent_v1__close_agent")
	msgs = items(ev, "agent_message")
	if len(msgs) != 1 {
		t.Fatalf("turn 2: %d answers", len(msgs))
	}
	text := msgs[0]["text"].(string)
	// The simulator counts what reached the model: turn 1's exchange is in the history (two tool
	// outputs now), and the namespaced call's output came back.
	if !strings.Contains(text, "2 tool outputs") || !strings.Contains(text, "Tool said:") || !strings.Contains(text, "turn two") ||
		strings.Contains(strings.ToLower(text), "unsupported") {
		t.Fatalf("turn 2 answer: %s", text)
	}

	run.answer = text
	return run
}
