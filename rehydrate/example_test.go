package rehydrate_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/wire"
)

// A follow-up turn: the stored chain (with a reasoning item that also carries an encrypted blob)
// plus the new input become one stateless vLLM request. The reasoning plaintext is replayed with an
// empty summary, encrypted_content and status stay behind, and only vLLM's members are forwarded.
func ExampleBuild() {
	var history []wire.Item
	for _, s := range []string{
		`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"2+2?"}],"status":"completed"}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"Add them."}],"encrypted_content":"gAAAA…","status":"completed"}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"4","annotations":[]}],"status":"completed"}`,
	} {
		it, _ := wire.ParseItem([]byte(s))
		history = append(history, it)
	}
	// The server decodes the body once (its intake scan hands wire the top-level members).
	var members map[string]json.RawMessage
	_ = json.Unmarshal([]byte(`{"model":"gpt-oss-20b","input":"And 3+3?","previous_response_id":"resp_1",
		"include":["reasoning.encrypted_content"],"reasoning":{"effort":"low","summary":"auto"}}`), &members)
	req, err := wire.DecodeCreateRequest(members)
	if err != nil {
		fmt.Println(err)
		return
	}

	input, _ := rehydrate.ParseInput(req.Input)
	res, err := rehydrate.Build(&rehydrate.Params{
		History: history,
		Input:   input,
		Request: req,
		NewID:   func(prefix string) string { return prefix + "new" },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(res.Body))
	fmt.Println(string(res.Input[0].JSON))
	fmt.Printf("%+v\n", res.Stats)
	// Output:
	// {"model":"gpt-oss-20b","stream":false,"store":false,"reasoning":{"effort":"low"},"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"2+2?"}]},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Add them."}]},{"type":"message","role":"assistant","content":"4"},{"type":"message","role":"user","content":[{"type":"input_text","text":"And 3+3?"}]}]}
	// {"id":"msg_new","type":"message","role":"user","content":[{"type":"input_text","text":"And 3+3?"}],"status":"completed"}
	// {Items:4 Bytes:412 ReasoningReplayed:1 ReasoningBytes:9 EncryptedDropped:1 DuplicatesDropped:0 ReasoningSkipped:0 EmptySkipped:0 SealedOpened:0 ReasoningDropped:0}
}

// A reasoning item that carries only encrypted_content cannot be replayed: respgate cannot read it
// and vLLM cannot accept it, so the request is rejected before any upstream call.
func ExampleBuild_encryptedOnly() {
	input, _ := rehydrate.ParseInput(json.RawMessage(`[{"role":"user","content":"hi"},
		{"type":"reasoning","id":"rs_9","summary":[],"encrypted_content":"gAAAA…"}]`))
	_, err := rehydrate.Build(&rehydrate.Params{Input: input})
	var ae *wire.APIError
	if errors.As(err, &ae) {
		fmt.Println(ae.Status, ae.Code, ae.Param)
		fmt.Println(ae.Message)
	}
	// Output:
	// 400 encrypted_reasoning_unsupported input[1]
	// Reasoning item 'rs_9' carries only encrypted_content, which respgate cannot read and vLLM cannot accept; send its plaintext content or omit the item.
}
