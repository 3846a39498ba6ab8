package wire

import (
	"encoding/json"
	"errors"
	"testing"
)

func decodeBody(t *testing.T, body string) (*CreateRequest, error) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return DecodeCreateRequest(m)
}

// Forwarded members keep the client's spelling next to their value, and absent or null members
// take OpenAI's defaults without JSON.
func TestDecodeCreateRequestKeepsTheSpellingAndFillsDefaults(t *testing.T) {
	r, err := decodeBody(t, `{"model":"m\u0065","input":"x","temperature":1.0,"top_p":null,"instructions":"a\u00e9",
		"tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"},{"type":"custom"}]}],
		"tool_choice":{"type":"function","name":"f","namespace":"ns"},"include":["message.output_text.logprobs"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if r.Model.Value != "me" || string(r.Model.JSON) != `"m\u0065"` || string(r.Instructions.JSON) != `"a\u00e9"` {
		t.Errorf("model %+v instructions %+v", r.Model, r.Instructions)
	}
	if r.Temperature.Value != 1 || string(r.Temperature.JSON) != "1.0" || r.TopP.Set() || r.TopP.Value != 1 {
		t.Errorf("temperature %+v top_p %+v", r.Temperature, r.TopP)
	}
	if !r.Store || r.Stream || !r.ParallelToolCalls.Value || r.Truncation.Value != "disabled" || r.ServiceTier.Value != "auto" {
		t.Errorf("defaults: %+v", r)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "ns" || len(r.Tools[0].Tools) != 2 || r.Tools[0].Tools[0].Name != "f" || r.Tools[0].Tools[1].Type != "custom" {
		t.Errorf("tools %+v", r.Tools)
	}
	if tc := r.ToolChoice; tc == nil || tc.Type != "function" || *tc.Name != "f" || *tc.Namespace != "ns" || tc.Mode != "" {
		t.Errorf("tool_choice %+v", r.ToolChoice)
	}
}

func TestDecodeMetadataNamesTheParam(t *testing.T) {
	var ae *APIError
	if _, err := DecodeMetadata(json.RawMessage(`{"k":1}`), "metadata"); !errors.As(err, &ae) || ae.Param != "metadata" {
		t.Fatalf("err = %v", err)
	}
	if v, err := DecodeMetadata(json.RawMessage(`null`), "metadata"); v != nil || err != nil {
		t.Fatalf("null: %s %v", v, err)
	}
}
