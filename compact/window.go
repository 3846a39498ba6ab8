package compact

import "github.com/respgate/respgate/wire"

// Window is OpenAI's compaction window, the answer of POST /v1/responses/compact
// (docs/compaction.md §4): "a list of all user messages, followed by a single compaction item"
// (openai-node's CompactedResponse.output). The Agents SDK's OpenAIResponsesCompactionSession
// replaces its history with it, so the user's own words survive every compaction verbatim and the
// compaction item stands for everything the model and the tools said.
type Window struct {
	// Users is every user message of the session, verbatim and in order: the head of the output.
	Users []wire.Item
	// Replaced is everything else, in order: system and developer messages, assistant messages,
	// reasoning, function calls and their outputs, earlier compaction items. The compaction item
	// stands for these (its payload lists their ids; the archive their digests).
	Replaced []wire.Item
	// Summarise is what the model is asked to summarise: the whole session, so every replaced
	// item is read beside the user messages that prompted it.
	Summarise []wire.Item
}

// PlanWindow splits a session (history then input, in order) into OpenAI's compaction window.
// Unlike PlanItems it keeps no recent turns whole and has no "nothing to compact": any session
// that is not empty gets its compaction item, even one of a single user message (whose item then
// stands for nothing but carries the summary).
func PlanWindow(items []wire.Item) Window {
	w := Window{Summarise: items}
	for _, it := range items {
		if isUserMessage(it) {
			w.Users = append(w.Users, it)
		} else {
			w.Replaced = append(w.Replaced, it)
		}
	}
	return w
}

// Empty reports whether the session has no item at all: there is nothing to summarise.
func (w *Window) Empty() bool { return len(w.Summarise) == 0 }

// Output is the compact answer's output: the user messages, then item (the compaction item).
func (w *Window) Output(item wire.Item) []wire.Item {
	out := make([]wire.Item, 0, len(w.Users)+1)
	return append(append(out, w.Users...), item)
}
