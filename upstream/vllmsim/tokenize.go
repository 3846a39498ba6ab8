package vllmsim

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"strings"
)

// tokenize serves POST /tokenize as vLLM does (entrypoints/openai/api_server.py tokenize,
// TokenizeCompletionRequest / TokenizeChatRequest → TokenizeResponse): {"model","prompt"} or
// {"model","messages"} in, {"count","max_model_len","tokens","token_strs":null} out. The count is
// the simulator's own: a token per whitespace-separated word, and for messages the 3 tokens of
// framing each message costs in a turn's input_tokens, so a gateway that sizes with it agrees
// with the context-length check of POST /v1/responses.
func (s *Sim) tokenize(w http.ResponseWriter, body []byte) {
	var req struct {
		Model    *string `json:"model"`
		Prompt   *string `json:"prompt"`
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, validationError("body", "json_invalid", "JSON decode error"))
		return
	}
	if req.Model != nil {
		if base, _ := splitModel(*req.Model); base != "" {
			if _, ok := s.lookup(base); !ok {
				writeError(w, unknownModel(base))
				return
			}
		}
	}
	var words []string
	switch {
	case req.Prompt != nil:
		words = strings.Fields(*req.Prompt)
	case req.Messages != nil:
		for _, m := range req.Messages {
			words = append(words, "<|start|>", "<|message|>", "<|end|>")
			var text string
			if json.Unmarshal(m.Content, &text) != nil {
				var parts []struct {
					Text string `json:"text"`
				}
				_ = json.Unmarshal(m.Content, &parts)
				for _, p := range parts {
					text += " " + p.Text
				}
			}
			words = append(words, strings.Fields(text)...)
		}
	default:
		writeError(w, validationError("body", "missing", "Field required"))
		return
	}
	b := append([]byte(`{"count":`), appendInt(nil, len(words))...)
	b = append(b, `,"max_model_len":`...)
	b = appendInt(b, s.opts.MaxModelLen)
	b = append(b, `,"tokens":[`...)
	for i, wd := range words {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, int(tokenOf(wd)))
	}
	b = append(b, `],"token_strs":null}`...)
	writeJSON(w, http.StatusOK, b)
}

// tokenOf is the simulated token id of a word: what /tokenize lists and what the prefix cache
// hashes.
func tokenOf(word string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(word))
	return h.Sum32() % 151936
}
