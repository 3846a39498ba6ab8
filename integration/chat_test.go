package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// The Chat Completions front door (docs/chat-completions.md): openai-go's chat client drives a
// tool loop through respgate, and the simulator's deterministic answers prove which reasoning
// items reached the model.

func chatClient(g *respgatetest.Gateway, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(g.URL), option.WithAPIKey(key), option.WithMaxRetries(0))
}

var chatTools = []openai.ChatCompletionToolUnionParam{
	openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "lookup",
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []string{"query"}}}),
	openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "weather",
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}),
}

// chatTurnResult is what one chat call gave the client.
type chatTurnResult struct {
	msg       openai.ChatCompletionMessage
	reasoning string
	finish    string
}

// chatSession is a client's chat loop: its visible history and how it calls the gateway.
type chatSession struct {
	t      *testing.T
	g      *respgatetest.Gateway
	client openai.Client
	model  string
	stream bool
	tools  []openai.ChatCompletionToolUnionParam
	msgs   []openai.ChatCompletionMessageParamUnion
}

func (cs *chatSession) call() chatTurnResult {
	cs.t.Helper()
	p := openai.ChatCompletionNewParams{Model: cs.model, Messages: cs.msgs, Tools: cs.tools}
	if !cs.stream {
		c, err := cs.client.Chat.Completions.New(cs.t.Context(), p)
		if err != nil {
			cs.t.Fatalf("chat completion: %v", err)
		}
		var rc struct {
			Reasoning string `json:"reasoning_content"`
		}
		_ = json.Unmarshal([]byte(c.Choices[0].Message.RawJSON()), &rc)
		return chatTurnResult{msg: c.Choices[0].Message, reasoning: rc.Reasoning, finish: c.Choices[0].FinishReason}
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := cs.client.Chat.Completions.NewStreaming(cs.t.Context(), p)
	var acc openai.ChatCompletionAccumulator
	var reasoning strings.Builder
	for s.Next() {
		ch := s.Current()
		acc.AddChunk(ch)
		var d struct {
			Choices []struct {
				Delta struct {
					Reasoning string `json:"reasoning_content"`
				}
			}
		}
		_ = json.Unmarshal([]byte(ch.RawJSON()), &d)
		if len(d.Choices) > 0 {
			reasoning.WriteString(d.Choices[0].Delta.Reasoning)
		}
	}
	if err := s.Err(); err != nil {
		cs.t.Fatalf("chat stream: %v", err)
	}
	if acc.Usage.TotalTokens == 0 {
		cs.t.Fatal("stream_options.include_usage: no usage chunk")
	}
	return chatTurnResult{msg: acc.Choices[0].Message, reasoning: reasoning.String(), finish: acc.Choices[0].FinishReason}
}

// step sends the history plus more, keeps the assistant's answer in the history as a client
// does (ToParam: visible text and tool calls, no reasoning) and answers each tool call.
func (cs *chatSession) step(more ...openai.ChatCompletionMessageParamUnion) chatTurnResult {
	cs.t.Helper()
	cs.msgs = append(cs.msgs, more...)
	r := cs.call()
	cs.msgs = append(cs.msgs, r.msg.ToParam())
	for _, tc := range r.msg.ToolCalls {
		cs.msgs = append(cs.msgs, openai.ToolMessage("result of "+tc.Function.Name, tc.ID))
	}
	return r
}

// upstreamReasoning is the reasoning texts of the n-th (from 0) upstream request's input, in order.
func upstreamReasoning(t *testing.T, g *respgatetest.Gateway, n int) []string {
	t.Helper()
	reqs := g.UpstreamRequests()
	if n >= len(reqs) {
		t.Fatalf("upstream saw %d requests, want more than %d", len(reqs), n)
	}
	var body struct {
		Input []struct {
			Type    string
			Content json.RawMessage
		}
	}
	if err := json.Unmarshal(reqs[n], &body); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range body.Input {
		if it.Type != "reasoning" {
			continue
		}
		var parts []struct{ Text string }
		_ = json.Unmarshal(it.Content, &parts)
		text := ""
		for _, p := range parts {
			text += p.Text
		}
		out = append(out, text)
	}
	return out
}

// toolLoop runs the 4-step chat tool loop: a tool call, its answer, another tool call, its answer.
func chatToolLoop(cs *chatSession) []chatTurnResult {
	return []chatTurnResult{
		cs.step(openai.UserMessage("remember: the code is 42. call lookup")),
		cs.step(),
		cs.step(openai.UserMessage("now call weather")),
		cs.step(),
	}
}

func TestChatToolLoopReplaysEveryEarlierReasoningItemInOrder(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		for _, model := range []string{parser, harmony} {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/stream=%v", model, stream), func(t *testing.T) {
					g := respgatetest.New(t, respgatetest.Options{Store: newStore(t)})
					cs := &chatSession{t: t, g: g, client: chatClient(g, "key-a"), model: model, stream: stream, tools: chatTools}
					turns := chatToolLoop(cs)
					if turns[0].finish != "tool_calls" || turns[1].finish != "stop" || turns[2].finish != "tool_calls" || turns[3].finish != "stop" {
						t.Fatalf("finish reasons %s %s %s %s", turns[0].finish, turns[1].finish, turns[2].finish, turns[3].finish)
					}
					for k := 1; k < 4; k++ {
						got := upstreamReasoning(t, g, k)
						if len(got) != k {
							t.Fatalf("upstream request %d carries %d reasoning items, want %d", k+1, len(got), k)
						}
						for j := range k {
							if got[j] != turns[j].reasoning || got[j] == "" {
								t.Fatalf("upstream request %d, reasoning item %d = %q, want turn %d's %q", k+1, j, got[j], j+1, turns[j].reasoning)
							}
						}
					}
					if !strings.Contains(turns[3].msg.Content, "3 reasoning items") {
						t.Fatalf("the model's last answer %q does not count the 3 replayed reasoning items", turns[3].msg.Content)
					}
					if want := `Prior reasoning: "` + quote40(turns[2].reasoning) + `"`; !strings.Contains(turns[3].reasoning, want) {
						t.Fatalf("the last reasoning %q does not quote the third one", turns[3].reasoning)
					}
				})
			}
		}
	})
}

// quote40 is the simulator's quote: whitespace collapsed, the first 40 runes.
func quote40(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) > 40 {
		r = r[:40]
	}
	return string(r)
}

// TestChatHiddenReasoningIsReplayedButNeverShown runs the tool loop with --reasoning-exposure
// hidden: no chat answer, streamed or not, carries the model's reasoning, yet every upstream
// request after the first still carries the earlier reasoning items.
func TestChatHiddenReasoningIsReplayedButNeverShown(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chat.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			g := respgatetest.New(t, respgatetest.Options{Store: st, Server: server.Config{ReasoningExposure: server.ExposureHidden}})
			cs := &chatSession{t: t, g: g, client: chatClient(g, "key-a"), model: harmony, stream: stream, tools: chatTools}
			for i, turn := range chatToolLoop(cs) {
				if turn.reasoning != "" || strings.Contains(turn.msg.RawJSON(), canary) {
					t.Fatalf("turn %d shows reasoning: %q %s", i+1, turn.reasoning, turn.msg.RawJSON())
				}
			}
			if got := upstreamReasoning(t, g, 3); len(got) != 3 || !strings.Contains(got[0], canary) {
				t.Fatalf("step 4's upstream request carries reasoning %q, want the 3 earlier items", got)
			}
		})
	}
}

func TestChatReplayNeedsTheExactVisibleHistory(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := respgatetest.New(t, respgatetest.Options{Store: newStore(t)})
		// Two parallel tool calls, their results, and the answer: two assistant messages.
		cs := &chatSession{t: t, g: g, client: chatClient(g, "key-a"), model: parser, tools: chatTools}
		first := cs.step(openai.UserMessage("use tools"))
		if len(first.msg.ToolCalls) != 2 {
			t.Fatalf("%d tool calls, want 2 parallel ones", len(first.msg.ToolCalls))
		}
		cs.step()
		base := cs.msgs // user, assistant(2 calls), tool, tool, assistant(answer)
		next := openai.UserMessage("and then?")
		send := func(name string, msgs []openai.ChatCompletionMessageParamUnion, tools []openai.ChatCompletionToolUnionParam, want int) {
			t.Helper()
			c := &chatSession{t: t, g: g, client: chatClient(g, "key-a"), model: parser, tools: tools, msgs: msgs}
			c.call()
			if got := upstreamReasoning(t, g, len(g.UpstreamRequests())-1); len(got) != want {
				t.Errorf("%s: upstream got %d reasoning items, want %d", name, len(got), want)
			}
		}
		with := func(k int, m openai.ChatCompletionMessageParamUnion) []openai.ChatCompletionMessageParamUnion {
			out := append([]openai.ChatCompletionMessageParamUnion(nil), base...)
			out[k] = m
			return append(out, next)
		}
		send("the exact history", append(append([]openai.ChatCompletionMessageParamUnion(nil), base...), next), chatTools, 2)

		edited := base[4].OfAssistant
		e := *edited
		e.Content.OfString = openai.String(edited.Content.OfString.Value + " (edited)")
		send("an edited answer", with(4, openai.ChatCompletionMessageParamUnion{OfAssistant: &e}), chatTools, 1)

		calls := base[1].OfAssistant
		r := *calls
		r.ToolCalls = []openai.ChatCompletionMessageToolCallUnionParam{calls.ToolCalls[1], calls.ToolCalls[0]}
		// The first message no longer matches, and the answer's record descends from it: nothing.
		send("reordered tool calls", with(1, openai.ChatCompletionMessageParamUnion{OfAssistant: &r}), chatTools, 0)

		send("a changed tool list", append(append([]openai.ChatCompletionMessageParamUnion(nil), base...), next), chatTools[:1], 0)
	})
}

func TestChatTenantsNeverShareReplayRecords(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := respgatetest.New(t, respgatetest.Options{Store: newStore(t)})
		a := &chatSession{t: t, g: g, client: chatClient(g, "key-a"), model: parser, tools: chatTools}
		a.step(openai.UserMessage("call lookup"))
		a.step()
		b := &chatSession{t: t, g: g, client: chatClient(g, "key-b"), model: parser, tools: chatTools, msgs: a.msgs}
		b.call()
		if got := upstreamReasoning(t, g, len(g.UpstreamRequests())-1); len(got) != 0 {
			t.Fatalf("tenant b's identical history got %d of tenant a's reasoning items", len(got))
		}
		a.call()
		if got := upstreamReasoning(t, g, len(g.UpstreamRequests())-1); len(got) != 2 {
			t.Fatalf("tenant a's history got %d reasoning items, want 2", len(got))
		}
	})
}

func TestChatReplaySurvivesARestart(t *testing.T) {
	reopen := map[string]func(t *testing.T) func() store.Store{
		"postgres": func(t *testing.T) func() store.Store {
			dsn := pgtest.DSN(t)
			return func() store.Store {
				st, err := postgres.Open(context.Background(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		},
		"sqlite": func(t *testing.T) func() store.Store {
			path := filepath.Join(t.TempDir(), "respgate.db")
			return func() store.Store {
				st, err := sqlite.Open(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		},
	}
	for name, mk := range reopen {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			open := mk(t)
			st := open()
			g1 := respgatetest.New(t, respgatetest.Options{Store: st})
			cs := &chatSession{t: t, g: g1, client: chatClient(g1, "key-a"), model: harmony, tools: chatTools, stream: true}
			cs.step(openai.UserMessage("call lookup"))
			_ = st.Close()

			st2 := open()
			t.Cleanup(func() { _ = st2.Close() })
			g2 := respgatetest.New(t, respgatetest.Options{Store: st2})
			cs.g, cs.client = g2, chatClient(g2, "key-a")
			r := cs.step()
			if got := upstreamReasoning(t, g2, 0); len(got) != 1 {
				t.Fatalf("after a restart the upstream got %d reasoning items, want 1", len(got))
			}
			if !strings.Contains(r.msg.Content, "1 reasoning items") {
				t.Fatalf("answer %q", r.msg.Content)
			}
		})
	}
}

// TestChatStepFourUpstreamInput logs, for the closing note, what vLLM receives at step 4 of the
// loop with the front door's replay and without it (the same visible history from a tenant
// with no records), and checks that only the replayed one carries the earlier reasoning.
func TestChatStepFourUpstreamInput(t *testing.T) {
	g := respgatetest.New(t)
	cs := &chatSession{t: t, g: g, client: chatClient(g, "key-a"), model: parser, tools: chatTools}
	chatToolLoop(cs)
	with := g.UpstreamRequests()[3]
	other := &chatSession{t: t, g: g, client: chatClient(g, "key-other"), model: parser, tools: chatTools, msgs: cs.msgs[:len(cs.msgs)-1]}
	other.call()
	without := g.UpstreamRequests()[4]
	for name, b := range map[string][]byte{"with replay": with, "without replay": without} {
		var body struct{ Input json.RawMessage }
		_ = json.Unmarshal(b, &body)
		t.Logf("step 4 upstream input %s:\n%s", name, body.Input)
	}
	if n, m := len(upstreamReasoning(t, g, 3)), len(upstreamReasoning(t, g, 4)); n != 3 || m != 0 {
		t.Fatalf("reasoning items: %d with replay (want 3), %d without (want 0)", n, m)
	}
	// 0+1+2+3 hits over the loop; the other tenant's 3 assistant messages are misses.
	_, metrics, _ := rawDo(t, "GET", strings.TrimSuffix(g.URL, "/v1")+"/metrics", "", "Authorization", "Bearer key-a")
	for _, want := range []string{"respgate_chat_replay_hits_total 6", "respgate_chat_replay_misses_total 3", "respgate_chat_replay_conflicts_total 0"} {
		if !strings.Contains(string(metrics), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// countingSaves is a store that counts finished replay saves.
type countingSaves struct {
	store.Store
	saves atomic.Int32
}

func (c *countingSaves) ReplayRecordSave(ctx context.Context, p *store.ReplayRecordSaveParams) error {
	err := c.Store.ReplayRecordSave(ctx, p)
	c.saves.Add(1)
	return err
}

func TestChatCaptureIsStoredBeforeTheTerminalChunk(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		base := newStore(t)
		if base == nil {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "respgate.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			base = st
		}
		st := &countingSaves{Store: base}
		g := respgatetest.New(t, respgatetest.Options{Store: st})
		c := chatClient(g, "key-a")
		s := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{Model: parser, Tools: chatTools,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("call lookup")}})
		finished := false
		for s.Next() {
			ch := s.Current()
			if len(ch.Choices) > 0 && ch.Choices[0].FinishReason != "" {
				finished = true
				if n := st.saves.Load(); n != 1 {
					t.Fatalf("the finish chunk arrived after %d replay saves, want 1", n)
				}
			}
		}
		if err := s.Err(); err != nil || !finished {
			t.Fatalf("stream: %v, finished %v", err, finished)
		}
	})
}

func TestChatFailedTurnBlocksTheOlderRecordsAtItsPosition(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := respgatetest.New(t, respgatetest.Options{Store: newStore(t)})
		// The same store behind a gateway whose model cuts every stream: same tenants, same scope.
		broken := respgatetest.New(t, respgatetest.Options{Store: g.Store, Sim: vllmsim.Options{Fault: "cut_after=4"}})
		cs := &chatSession{t: t, g: g, client: chatClient(g, "key-a"), model: parser, tools: chatTools}
		cs.step(openai.UserMessage("call lookup"))

		// The client regenerates the first answer; the stream breaks: an error, not an answer.
		c := chatClient(broken, "key-a")
		s := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{Model: parser, Tools: chatTools, Messages: cs.msgs[:1]})
		for s.Next() {
		}
		if s.Err() == nil {
			t.Fatal("a cut stream ended without an error")
		}
		// The first answer's record is ambiguous now: the history that shows it gets no replay.
		cs.call()
		if got := upstreamReasoning(t, g, len(g.UpstreamRequests())-1); len(got) != 0 {
			t.Fatalf("a record older than a failed turn at its position was replayed (%d reasoning items)", len(got))
		}
	})
}
