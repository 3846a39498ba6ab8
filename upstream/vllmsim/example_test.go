package vllmsim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/respgate/respgate/upstream/vllmsim"
)

// The answer depends on what reached the model: here the fact from the first user message.
func Example() {
	sim := vllmsim.New(vllmsim.Options{})
	srv := httptest.NewServer(sim)
	defer srv.Close()

	body := `{"model":"Qwen/Qwen3-sim","input":[` +
		`{"role":"user","content":"remember: the code is 42"},` +
		`{"role":"user","content":"What is the code?"}]}`
	resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		panic(err)
	}
	for _, item := range out.Output {
		fmt.Printf("%s: %s\n", item.Type, item.Content[0].Text)
	}
	fmt.Println(out.Status, len(sim.Requests()), "request recorded")
	// Output:
	// reasoning: Thinking about "What is the code?". Prior reasoning: none.
	// message: Seen 2 messages, 0 reasoning items, 0 tool outputs. Facts: the code is 42.
	// completed 1 request recorded
}

// Faults ride in the model name, so they pass through a gateway that forwards the model; the
// response names the base model.
func Example_faults() {
	srv := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	defer srv.Close()

	body := `{"model":"openai/gpt-oss-sim?max_output_tokens=4","input":"Hello"}`
	resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var out struct {
		Model             string `json:"model"`
		Status            string `json:"status"`
		IncompleteDetails struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		Usage struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		panic(err)
	}
	fmt.Println(out.Model, out.Status, out.IncompleteDetails.Reason, out.Usage.OutputTokens)

	resp, err = http.Post(srv.URL+"/v1/responses", "application/json",
		strings.NewReader(`{"model":"openai/gpt-oss-sim?status=503","input":"Hello"}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Type string `json:"type"`
			Code int    `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, e.Error.Type, e.Error.Code)
	// Output:
	// openai/gpt-oss-sim incomplete max_output_tokens 4
	// 503 Service Unavailable 503
}
