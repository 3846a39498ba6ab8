package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/respgate/respgate/upstream"
)

// A stream is read with Events until io.EOF; Data is only valid until the loop's body returns,
// so copy what you keep.
// The final event lacks its blank line, and the "data:" of the second event has no space and
// no "event:" field: both are decoded.
func ExampleClient_Stream() {
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: response.created\r\ndata: {\"type\":\"response.created\"}\r\n\r\n"+
			": keepalive\n\n"+
			"data:{\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"+
			"event: response.completed\ndata: {\"type\":\"response.completed\"}\n")
	}))
	defer vllm.Close()
	c, err := upstream.New(upstream.Config{BaseURL: vllm.URL + "/v1", APIKey: "sk-local"})
	if err != nil {
		panic(err)
	}
	defer c.CloseIdleConnections()

	s, err := c.Stream(context.Background(), []byte(`{"model":"m","input":"hello","stream":true}`))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	var kept [][]byte
	for ev, err := range s.Events() {
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		// Data is valid until the loop's body returns: keep a copy.
		kept = append(kept, append([]byte(nil), ev.Data...))
		fmt.Println(ev.Type)
	}
	fmt.Println(len(kept), "events")
	// Output:
	// response.created
	// response.output_text.delta
	// response.completed
	// 3 events
}

// Every failure is an *upstream.Error whose APIError is the envelope for the gateway's client:
// vLLM's unknown-model 404 (with its integer code) keeps its status and message, and gets
// OpenAI's code and param for it (docs/errors.md).
func ExampleError_APIError() {
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"message":"The model 'x' does not exist.","type":"NotFoundError","param":null,"code":404}}`)
	}))
	defer vllm.Close()
	c, _ := upstream.New(upstream.Config{BaseURL: vllm.URL + "/v1"})
	defer c.CloseIdleConnections()

	_, err := c.Create(context.Background(), []byte(`{"model":"x","input":"hi","stream":false}`))
	var ue *upstream.Error
	if errors.As(err, &ue) {
		fmt.Println(ue.Kind, ue.Status, ue.Code)
		fmt.Println(string(ue.APIError().Envelope()))
	}
	// Output:
	// http 404 404
	// {"error":{"message":"The model 'x' does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}
}
