package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// Sizing a turn for automatic compaction (docs/compaction.md §6): the history is what vLLM said it
// was (the previous response's usage), the new input is counted by vLLM's own tokenizer and chat
// template (POST /tokenize), and compact.EstimateTokens, a deliberate over-estimate, is only the
// fallback when neither is available.

// tokenizeTimeout bounds one /tokenize call: counting is fast, and a turn must not wait on it.
const tokenizeTimeout = 5 * time.Second

// sizing is how a turn's size was found, for the log and the tests' reading of it.
type sizing struct {
	tokens int
	// history and input say where each part's count came from: "usage", "tokenize" or "estimate".
	history, input string
}

// sessionSize is the size in tokens of what vLLM would receive for the turn (ex.history then
// ex.input): the history as the previous response's usage reports it (input_tokens, which
// covered everything before that turn's output, plus output_tokens, its output, which the
// history now replays), unless a compaction item of the input cut the history; else counted by
// /tokenize; else estimated. The input is counted by /tokenize, else estimated.
func (e *Engine) sessionSize(ctx context.Context, model string, ex *expanded) sizing {
	var z sizing
	if n := usageTokens(ex.prevUsage); n > 0 && !ex.historyCut {
		z.tokens, z.history = n, "usage"
	} else if n, ok := e.countTokens(ctx, model, ex.history); ok {
		z.tokens, z.history = n, "tokenize"
	} else {
		z.tokens, z.history = compact.EstimateTokens(ex.history), "estimate"
	}
	if n, ok := e.countTokens(ctx, model, ex.input); ok {
		z.tokens, z.input = z.tokens+n, "tokenize"
	} else {
		z.tokens, z.input = z.tokens+compact.EstimateTokens(ex.input), "estimate"
	}
	return z
}

// usageTokens is input_tokens + output_tokens of a usage object (0 when absent or null).
func usageTokens(raw json.RawMessage) int {
	var u struct {
		In  int `json:"input_tokens"`
		Out int `json:"output_tokens"`
	}
	if wire.IsNull(raw) || json.Unmarshal(raw, &u) != nil || u.In < 0 || u.Out < 0 {
		return 0
	}
	return u.In + u.Out
}

// countTokens counts items with vLLM's POST /tokenize (chat form: the model's chat template
// applies), false when it cannot: an upstream without the route (remembered: it is not asked
// again), a failure, or nothing countable. Items /tokenize cannot take as a chat message are
// estimated and added.
func (e *Engine) countTokens(ctx context.Context, model string, items []wire.Item) (int, bool) {
	if len(items) == 0 {
		return 0, true
	}
	if e.noTokenize.Load() {
		return 0, false
	}
	msgs, rest := tokenizeMessages(items)
	if len(msgs) == 0 {
		return 0, false
	}
	body, err := json.Marshal(struct {
		Model    string         `json:"model"`
		Messages []tokenMessage `json:"messages"`
	}{model, msgs})
	if err != nil {
		return 0, false
	}
	tctx, cancel := context.WithTimeout(ctx, tokenizeTimeout)
	defer cancel()
	raw, err := e.upstream.Tokenize(tctx, upstream.Route{Model: model}, body) // not in upstreamLatency: that is generation's
	if err != nil {
		var ue *upstream.Error
		// Only an upstream without the route is remembered: vLLM's 404 for one request's unknown
		// model ("The model `x` does not exist.") must not switch counting off for every model
		// of the replica (issue 38 item 19).
		if errors.As(err, &ue) && (ue.Status == http.StatusNotFound || ue.Status == http.StatusMethodNotAllowed) &&
			!strings.Contains(strings.ToLower(ue.Message), "model") {
			e.noTokenize.Store(true)
			e.log.Warn("the upstream has no /tokenize; automatic compaction estimates sizes")
		}
		return 0, false
	}
	var out struct {
		Count *int `json:"count"`
	}
	if json.Unmarshal(raw, &out) != nil || out.Count == nil || *out.Count < 0 {
		return 0, false
	}
	return *out.Count + compact.EstimateTokens(rest), true
}

// tokenMessage is a chat message of a /tokenize request.
type tokenMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// tokenizeMessages turns items into the chat messages whose tokens they cost: a message as its
// role and text; a function call, its output and reasoning as assistant / user text (tool-role
// messages need ids some chat templates check). Other items are returned in rest.
func tokenizeMessages(items []wire.Item) (msgs []tokenMessage, rest []wire.Item) {
	for _, it := range items {
		var v struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			Name      string          `json:"name"`
			Arguments string          `json:"arguments"`
			Output    json.RawMessage `json:"output"`
		}
		if json.Unmarshal(it.JSON, &v) != nil {
			rest = append(rest, it)
			continue
		}
		if v.Type == "" && v.Role != "" {
			v.Type = wire.TypeMessage
		}
		switch v.Type {
		case wire.TypeMessage:
			role := v.Role
			if role == "developer" {
				role = "system" // every chat template knows system
			}
			msgs = append(msgs, tokenMessage{role, contentText(v.Content)})
		case wire.TypeFunctionCall:
			msgs = append(msgs, tokenMessage{"assistant", v.Name + " " + v.Arguments})
		case "function_call_output":
			msgs = append(msgs, tokenMessage{"user", contentText(v.Output)})
		case wire.TypeReasoning:
			msgs = append(msgs, tokenMessage{"assistant", contentText(v.Content)})
		default:
			rest = append(rest, it)
		}
	}
	return msgs, rest
}

// contentText is a content (or output) member's text: the string itself, or its parts' text and
// refusals joined by newlines.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text + p.Refusal)
	}
	return b.String()
}
