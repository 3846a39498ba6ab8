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

// reasoning.context is one of two values (an unknown one is a 400 naming it), and include
// reasoning.encrypted_content is found by Includes.
func TestReasoningContextAndIncludedEncryptedContent(t *testing.T) {
	r, err := decodeBody(t, `{"model":"m","reasoning":{"effort":"low","context":"current_turn"},"include":["reasoning.encrypted_content"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if r.Reasoning.Context == nil || *r.Reasoning.Context != ContextCurrentTurn || !r.Includes(IncludeEncryptedReasoning) {
		t.Fatalf("reasoning %+v include %v", r.Reasoning, r.Include)
	}
	if r, _ := decodeBody(t, `{"model":"m"}`); r.Includes(IncludeEncryptedReasoning) {
		t.Fatal("Includes without include")
	}
	_, err = decodeBody(t, `{"model":"m","reasoning":{"context":"everything"}}`)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != "reasoning.context" || ae.Code != "invalid_value" {
		t.Fatalf("unknown context: %v", err)
	}
}
