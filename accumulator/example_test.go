package accumulator_test

import (
	"bytes"
	"fmt"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/wire"
)

// The server's side of one streamed turn: Start, Feed every upstream event (writing what each
// call returns), Close, store the Result, then Terminal and [DONE]. Here vLLM skips the message's
// added events and sends response.completed with status incomplete; the client still gets a
// complete, ordered stream and exactly one response.incomplete.
func Example() {
	n := 0
	acc := accumulator.New(accumulator.Options{
		ResponseID: "resp_1",
		NewID:      func(prefix string) string { n++; return fmt.Sprintf("%s%d", prefix, n) },
	})
	upstream := []wire.Event{
		{Type: "response.output_text.delta", Data: []byte(`{"type":"response.output_text.delta","output_index":0,"content_index":1,"item_id":"x","delta":"Hel"}`)},
		{Type: "response.output_text.delta", Data: []byte(`{"type":"response.output_text.delta","output_index":0,"content_index":1,"item_id":"x","delta":"lo"}`)},
		{Type: "response.completed", Data: []byte(`{"type":"response.completed","response":{"status":"incomplete","output":[],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}}`)},
	}
	var out []byte
	out = acc.Start(out)
	var err error
	for _, ev := range upstream {
		if out, err = acc.Feed(out, ev); err != nil || acc.Done() {
			break
		}
	}
	out, res := acc.Close(out, err)
	// … store res here; on a storage failure set res.Status = "failed" and res.Error …
	out = acc.Terminal(out, res)
	out = append(out, wire.DoneFrame...)

	for _, line := range bytes.Split(out, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("event: ")) {
			fmt.Println(string(line[len("event: "):]))
		}
	}
	fmt.Println(res.Status, string(res.Output[0].JSON))
	// Output:
	// response.created
	// response.in_progress
	// response.output_item.added
	// response.content_part.added
	// response.output_text.delta
	// response.output_text.delta
	// response.output_text.done
	// response.content_part.done
	// response.output_item.done
	// response.incomplete
	// incomplete {"id":"msg_1","type":"message","status":"incomplete","content":[{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]}],"role":"assistant"}
}
