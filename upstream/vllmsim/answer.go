package vllmsim

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/respgate/respgate/wire"
)

// The simulated model: a pure function from what reached it to the items it generates. The format is
// documented in the package doc; tests and users rely on it, so change it only together with that doc.

type itemKind uint8

const (
	kindReasoning itemKind = iota + 1
	kindMessage
	kindCall
)

// outItem is one generated output item.
type outItem struct {
	kind   itemKind
	tokens []string // the generated tokens; joined they are the item's text or arguments
	cut    bool     // generation stopped inside this item (max_output_tokens)
	name   string   // function name (kindCall)

	streamID, finalID         string // ids in the stream and in the final response
	streamCallID, finalCallID string // call_ids likewise (kindCall)

	esc []byte // cache of the text as a JSON string
}

// appendText appends the item's text (or arguments) as a JSON string. It is escaped once, however
// many events repeat it: a huge= text is 16 MiB.
func (it *outItem) appendText(b []byte) []byte {
	if it.esc == nil {
		it.esc = wire.AppendString(nil, strings.Join(it.tokens, ""))
	}
	return append(b, it.esc...)
}

// quote collapses whitespace and keeps the first 40 runes.
func quote(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= 40 {
		return s
	}
	n := 0
	for i := range s {
		if n == 40 {
			return s[:i]
		}
		n++
	}
	return s
}

func reasoningText(c *conversation) string {
	var b strings.Builder
	b.WriteString(`Thinking about "`)
	b.WriteString(quote(c.lastUser))
	b.WriteString(`". Prior reasoning: `)
	if c.lastReason == nil {
		b.WriteString("none.")
	} else {
		b.WriteString(`"`)
		b.WriteString(quote(*c.lastReason))
		b.WriteString(`".`)
	}
	return b.String()
}

// facts returns what follows every "remember:" (any case) in the user texts, up to the end of its line.
func facts(userTexts []string) []string {
	const marker = "remember:"
	var out []string
	for _, text := range userTexts {
		for i := 0; i+len(marker) <= len(text); i++ {
			if !strings.EqualFold(text[i:i+len(marker)], marker) {
				continue
			}
			line, _, _ := strings.Cut(text[i+len(marker):], "\n")
			if f := strings.TrimRight(strings.TrimSpace(line), ". "); f != "" {
				out = append(out, f)
			}
			i += len(marker) - 1
		}
	}
	return out
}

// HandoffPhrase is what marks a request for a handoff summary (respgate's compaction prompt says
// it): the simulated model then answers with the summary handoffText writes.
const HandoffPhrase = "summary for another model"

// handoffText is the simulated model's handoff summary: what it saw, and every remembered fact it
// saw on a line of its own as "remember: <fact>", so a model reading the summary (the simulator
// included) knows them again and a test can prove which facts survived compaction.
func handoffText(c *conversation) string {
	var b strings.Builder
	b.WriteString("Handoff summary: ")
	b.WriteString(strconv.Itoa(c.messages - 1))
	b.WriteString(" earlier messages, ")
	b.WriteString(strconv.Itoa(c.toolOutputs))
	b.WriteString(" tool outputs.")
	for _, f := range facts(c.userTexts) {
		b.WriteString("\nremember: ")
		b.WriteString(f)
	}
	return b.String()
}

func answerText(c *conversation) string {
	if strings.Contains(strings.ToLower(c.lastUser), HandoffPhrase) {
		return handoffText(c)
	}
	var b strings.Builder
	b.WriteString("Seen ")
	b.WriteString(strconv.Itoa(c.messages))
	b.WriteString(" messages, ")
	b.WriteString(strconv.Itoa(c.reasoning))
	b.WriteString(" reasoning items, ")
	b.WriteString(strconv.Itoa(c.toolOutputs))
	b.WriteString(" tool outputs. Facts: ")
	if fs := facts(c.userTexts); len(fs) > 0 {
		b.WriteString(strings.Join(fs, "; "))
	} else {
		b.WriteString("none")
	}
	b.WriteString(".")
	if len(c.toolSaid) > 0 {
		b.WriteString(" Tool said: ")
		b.WriteString(strings.Join(c.toolSaid, "; "))
		b.WriteString(".")
	}
	return b.String()
}

// selectCalls returns the tools the model calls, or none when it answers in text.
func selectCalls(req *createRequest, c *conversation) []functionTool {
	tools := req.functionTools()
	tc := req.toolChoice()
	if len(tools) == 0 || tc.mode == "none" || len(c.toolSaid) > 0 {
		return nil
	}
	var sel []functionTool
	switch {
	case tc.mode == "function":
		sel = []functionTool{{name: tc.name}}
		for _, t := range tools {
			if t.name == tc.name {
				sel = []functionTool{t}
			}
		}
	case strings.Contains(strings.ToLower(c.lastUser), "use tools"):
		sel = tools
	default:
		lower := strings.ToLower(c.lastUser)
		for _, t := range tools {
			if mentionsCall(lower, strings.ToLower(t.name)) {
				sel = append(sel, t)
			}
		}
		if len(sel) == 0 {
			sel = topicTools(tools, c.lastUser)
		}
		if len(sel) == 0 && tc.mode == "required" {
			sel = tools[:1]
		}
	}
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls && len(sel) > 1 {
		sel = sel[:1] // vLLM's maybe_filter_parallel_tool_calls
	}
	return sel
}

// mentionsCall reports whether text contains "call <name>" with name ending at a word boundary.
func mentionsCall(text, name string) bool {
	needle := "call " + name
	for from := 0; ; {
		i := strings.Index(text[from:], needle)
		if i < 0 {
			return false
		}
		end := from + i + len(needle)
		if end == len(text) {
			return true
		}
		r, _ := utf8.DecodeRuneInString(text[end:])
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.') {
			return true
		}
		from = end
	}
}

// tokenize splits s into tokens: each is a whitespace-free word with the whitespace after it (leading
// whitespace belongs to the first token). Joined, the tokens are s again.
func tokenize(s string) []string {
	var out []string
	start, inSpace, seenWord := 0, false, false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if !space && inSpace && seenWord {
			out = append(out, s[start:i])
			start = i
		}
		seenWord = seenWord || !space
		inSpace = space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// fillers are the first filler tokens, shared by every tokens= request (benchmarks ask for the same
// long answers again and again).
var fillers = func() []string {
	f := make([]string, 4096)
	for i := range f {
		f[i] = "w" + strconv.Itoa(i+1) + " "
	}
	return f
}()

func filler(i int) string {
	if i <= len(fillers) {
		return fillers[i-1]
	}
	return "w" + strconv.Itoa(i) + " "
}

// exactly returns tokens cut or padded with filler words to n tokens.
func exactly(tokens []string, n int) []string {
	if len(tokens) >= n {
		tokens = tokens[:n]
		tokens[n-1] = strings.TrimRightFunc(tokens[n-1], unicode.IsSpace)
		return tokens
	}
	out := make([]string, len(tokens), n)
	copy(out, tokens)
	if k := len(out); k > 0 && !strings.HasSuffix(out[k-1], " ") {
		out[k-1] += " "
	}
	for i := 1; len(out) < n; i++ {
		out = append(out, filler(i))
	}
	out[n-1] = strings.TrimRight(out[n-1], " ")
	return out
}

// planItems returns the items the model would generate without a token limit, and with huge= the
// item whose first token is the huge placeholder.
func planItems(d Dialect, req *createRequest, c *conversation, f *fault) (items []*outItem, huge *outItem) {
	if !f.noReasoning {
		items = append(items, &outItem{kind: kindReasoning, tokens: tokenize(reasoningText(c))})
	}
	calls := selectCalls(req, c)
	text := answerText(c)
	if len(calls) > 0 {
		text = ""
		if d == ReasoningParser {
			names := make([]string, len(calls))
			for i, t := range calls {
				names[i] = t.name
			}
			text = "Calling " + strings.Join(names, ", ") + "."
		}
	}
	if text != "" {
		tokens := tokenize(text)
		if f.tokens > 0 {
			tokens = exactly(tokens, f.tokens)
		}
		items = append(items, &outItem{kind: kindMessage, tokens: tokens})
	}
	value := strings.Join(strings.Fields(c.lastUser), " ")
	for _, t := range calls {
		var args []string
		if !f.noArgs {
			args = tokenize(string(t.arguments(value, c.lastUser)))
		}
		items = append(items, &outItem{kind: kindCall, name: t.name, tokens: args})
	}
	if f.huge > 0 && len(items) > 0 {
		target := items[0]
		for _, it := range items {
			if it.kind == kindMessage {
				target = it
				break
			}
		}
		// A placeholder the stream sizes when it writes the first delta (stream.go).
		target.tokens = append([]string{strings.Repeat("x", f.huge) + " "}, target.tokens...)
		huge = target
	}
	return items, huge
}

// truncate keeps the first budget tokens (budget 0: no limit) and reports whether it cut anything.
// An item of which no token was generated is dropped.
func truncate(items []*outItem, budget int) ([]*outItem, bool) {
	if budget <= 0 {
		return items, false
	}
	used := 0
	for i, it := range items {
		n := len(it.tokens)
		if used+n <= budget {
			used += n
			continue
		}
		keep := budget - used
		if keep == 0 {
			return items[:i], true
		}
		it.tokens = it.tokens[:keep]
		it.cut = true
		return items[:i+1], true
	}
	return items, false
}
