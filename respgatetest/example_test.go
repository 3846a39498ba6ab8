package respgatetest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
)

// These tests are what a test of your own code looks like: respgatetest.New starts respgate
// in-process with the vLLM simulator as its model, and the OpenAI SDK talks to it over HTTP.
// docs/testing.md quotes them.

func TestAgentRemembersAcrossTurns(t *testing.T) {
	gw := respgatetest.New(t) // stopped when the test ends
	client := openai.NewClient(option.WithBaseURL(gw.URL), option.WithAPIKey("test-key"))

	// A streamed turn, as your application would make it.
	stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: "openai/gpt-oss-sim",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember: the launch code is 1234")},
	})
	var first responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			first = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}

	// The next turn continues it; respgate replays the stored history to the model.
	second, err := client.Responses.New(t.Context(), responses.ResponseNewParams{
		Model:              "openai/gpt-oss-sim",
		PreviousResponseID: openai.String(first.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the launch code?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The simulator repeats every "remember:" fact it was sent, so this proves the history arrived.
	if got := second.OutputText(); !strings.Contains(got, "Facts: the launch code is 1234.") {
		t.Fatalf("answer %q", got)
	}

	// And exactly what the model received: the whole history, reasoning included, never stored.
	reqs := gw.UpstreamRequests()
	var last struct {
		Store bool              `json:"store"`
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(reqs[len(reqs)-1], &last); err != nil {
		t.Fatal(err)
	}
	if last.Store || len(last.Input) != 4 { // user, reasoning, assistant, user
		t.Fatalf("the model got store=%v and %d input items", last.Store, len(last.Input))
	}
}

func TestClientSurvivesACutStream(t *testing.T) {
	gw := respgatetest.New(t)
	client := openai.NewClient(option.WithBaseURL(gw.URL), option.WithAPIKey("test-key"), option.WithMaxRetries(0))

	// Faults are chosen per request through the model name: here vLLM drops the connection after
	// five events. respgate ends the client's stream with response.failed, which it also stores.
	stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: "openai/gpt-oss-sim?cut_after=5",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a long story.")},
	})
	var terminal responses.ResponseStreamEventUnion
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.completed", "response.incomplete", "response.failed":
			terminal = ev
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if terminal.Type != "response.failed" {
		t.Fatalf("terminal event %q, want response.failed", terminal.Type)
	}
	stored, err := client.Responses.Get(t.Context(), terminal.Response.ID, responses.ResponseGetParams{})
	if err != nil || stored.Status != "failed" {
		t.Fatalf("stored response: %v, %v", stored, err)
	}
}
