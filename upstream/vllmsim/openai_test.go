package vllmsim

import (
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestOpenAIGoClient drives the simulator with the official Go SDK, streaming and not, in vLLM's
// dialect and clean.
func TestOpenAIGoClient(t *testing.T) {
	srv, sim := newServer(t, Options{})
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	const want = "Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: the door code is 1234."
	for _, model := range []string{HarmonyModel, ParserModel, HarmonyModel + "?quirks=none", ParserModel + "?quirks=none"} {
		params := responses.ResponseNewParams{
			Model: model,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember: the door code is 1234")},
		}
		t.Run(model+"/New", func(t *testing.T) {
			resp, err := client.Responses.New(t.Context(), params)
			if err != nil {
				t.Fatal(err)
			}
			if resp.OutputText() != want || resp.Status != "completed" || len(resp.Output) != 2 ||
				resp.Output[0].Type != "reasoning" || resp.Usage.OutputTokens == 0 {
				t.Errorf("text %q status %q output %d usage %+v", resp.OutputText(), resp.Status, len(resp.Output), resp.Usage)
			}
			if got := resp.Output[0].Content[0].Text; !strings.HasPrefix(got, `Thinking about "remember: the door code is 1234"`) {
				t.Errorf("reasoning %q", got)
			}
		})
		t.Run(model+"/NewStreaming", func(t *testing.T) {
			stream := client.Responses.NewStreaming(t.Context(), params)
			defer stream.Close()
			var text, reasoning strings.Builder
			var completed *responses.Response
			var n int
			for stream.Next() {
				ev := stream.Current()
				if int(ev.SequenceNumber) != n {
					t.Errorf("sequence_number %d, want %d", ev.SequenceNumber, n)
				}
				n++
				switch ev.Type {
				case "response.output_text.delta":
					text.WriteString(ev.Delta)
				case "response.reasoning_text.delta":
					reasoning.WriteString(ev.Delta)
				case "response.completed":
					r := ev.AsResponseCompleted().Response
					completed = &r
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if text.String() != want || completed == nil || completed.OutputText() != want ||
				completed.Output[0].Content[0].Text != reasoning.String() {
				t.Errorf("streamed %q, completed %v", text.String(), completed != nil)
			}
		})
	}
	t.Run("tool call round trip", func(t *testing.T) {
		tools := []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather",
			map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}, false)}
		resp, err := client.Responses.New(t.Context(), responses.ResponseNewParams{
			Model: ParserModel, Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Paris: call get_weather")},
		})
		if err != nil {
			t.Fatal(err)
		}
		call := resp.Output[2].AsFunctionCall()
		if call.Name != "get_weather" || call.Arguments != `{"city":"Paris: call get_weather"}` {
			t.Fatalf("call %+v", call)
		}
		output := responses.ResponseInputItemParamOfFunctionCallOutput("21C")
		output.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		input := responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Paris: call get_weather", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
			output,
		}
		resp, err = client.Responses.New(t.Context(), responses.ResponseNewParams{
			Model: HarmonyModel, Tools: tools, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.OutputText(); got != "Seen 1 messages, 0 reasoning items, 1 tool outputs. Facts: none. Tool said: 21C." {
			t.Errorf("answer %q", got)
		}
		reqs := sim.Requests()
		if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, `"function_call_output"`) {
			t.Errorf("recorded body %s", last)
		}
	})
	t.Run("errors decode", func(t *testing.T) {
		_, err := client.Responses.New(t.Context(), responses.ResponseNewParams{
			Model: "nope", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "404" || apiErr.Type != "NotFoundError" || apiErr.Param != "model" {
			t.Errorf("err %v", err)
		}
	})
}
