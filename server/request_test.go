package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

func TestDecodeCreateRejectsBadFieldsWithTheirParam(t *testing.T) {
	for _, tc := range []struct {
		body, param, code string
	}{
		{`[]`, "", "invalid_json"},
		{`{"input":"x"}`, "model", "missing_required_parameter"},
		{`{"model":1,"input":"x"}`, "model", "invalid_type"},
		{`{"model":"m","input":"x","previous_response_id":"resp_1","conversation":"conv_1"}`, "previous_response_id", "invalid_parameter_combination"},
		{`{"model":"m","input":"x","conversation":{"id":""}}`, "conversation", "invalid_type"},
		{`{"model":"m","input":"x","store":"yes"}`, "store", "invalid_type"},
		{`{"model":"m","input":"x","background":true,"store":false}`, "background", "invalid_parameter_combination"},
		{`{"model":"m","input":"x","stream_options":{"include_obfuscation":true}}`, "stream_options", "invalid_parameter_combination"},
		{`{"model":"m","input":"x","prompt":{"id":"p"}}`, "prompt", "unsupported_parameter"},
		{`{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens", "invalid_value"},
		{`{"model":"m","input":"x","temperature":2.5}`, "temperature", "invalid_value"},
		{`{"model":"m","input":"x","top_p":"1"}`, "top_p", "invalid_type"},
		{`{"model":"m","input":"x","top_logprobs":21}`, "top_logprobs", "invalid_value"},
		{`{"model":"m","input":"x","truncation":"middle"}`, "truncation", "invalid_value"},
		{`{"model":"m","input":"x","service_tier":"gold"}`, "service_tier", "invalid_value"},
		{`{"model":"m","input":"x","safety_identifier":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`, "safety_identifier", "string_above_max_length"},
		{`{"model":"m","input":"x","metadata":{"k":1}}`, "metadata", "invalid_type"},
		{`{"model":"m","input":"x","reasoning":{"effort":"huge"}}`, "reasoning.effort", "invalid_value"},
		{`{"model":"m","input":"x","text":"plain"}`, "text", "invalid_type"},
		{`{"model":"m","input":"x","tools":[{"name":"f"}]}`, "tools", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","tools":[]}]}`, "tools[0].name", "missing_required_parameter"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"a"}]}`, "tools[0].tools", "invalid_type"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"a","tools":[null]}]}`, "tools[0].tools[0]", "invalid_type"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"a","tools":[{"type":"function"}]}]}`, "tools[0].tools[0].name", "missing_required_parameter"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"a","tools":[{"type":"function"}]},{"name":"q"}]}`, "tools", "invalid_value"},
		{`{"model":"m","input":"x","tool_choice":"sometimes"}`, "tool_choice", "invalid_value"},
		{`{"model":"m","input":"x","include":["everything"]}`, "include", "invalid_value"},
		{`{"model":"m","input":"x","include":[7]}`, "include", "invalid_type"},
		{`{"model":"m","input":"x","instructions":[{"role":"user"}]}`, "instructions", "invalid_type"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"x"},{"type":"function","name":"x"}]}`, "", ""}, // rehydrate's: tool_name_conflict
	} {
		_, err := decodeCreate([]byte(tc.body), 64)
		if tc.code == "" {
			if err != nil {
				t.Errorf("%s: %v, want it decoded", tc.body, err)
			}
			continue
		}
		var ae *wire.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != tc.param || ae.Code != tc.code {
			t.Errorf("%s: got %v, want 400 param %q code %q", tc.body, err, tc.param, tc.code)
		}
	}
}

func TestDecodeCreateFillsTheEchoWithOpenAIDefaults(t *testing.T) {
	r, err := decodeCreate([]byte(`{"model":"m","input":"x","client_metadata":{"ignored":true},"conversation":{"id":"conv_1"}}`), 64)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Store || r.Stream || r.ConversationID != "conv_1" {
		t.Fatalf("store/stream/conversation: %v %v %q", r.Store, r.Stream, r.ConversationID)
	}
	echo, err := wire.Marshal(r.echo)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(echo, &m)
	want := map[string]string{
		"background": "false", "parallel_tool_calls": "true", "temperature": "1", "top_p": "1", "presence_penalty": "0",
		"frequency_penalty": "0", "top_logprobs": "0", "truncation": `"disabled"`, "service_tier": `"auto"`, "store": "true",
		"tool_choice": `"auto"`, "tools": "[]", "metadata": "{}", "reasoning": "null", "instructions": "null",
		"max_output_tokens": "null", "max_tool_calls": "null", "previous_response_id": "null", "safety_identifier": "null",
		"prompt_cache_key": "null", "conversation": `{"id":"conv_1"}`, "text": `{"format":{"type":"text"}}`,
	}
	for k, v := range want {
		if string(m[k]) != v {
			t.Errorf("echo %s = %s, want %s", k, m[k], v)
		}
	}
	if _, ok := m["client_metadata"]; ok {
		t.Errorf("an unknown top-level member reached the echo")
	}
}

// A member nested deeper than jsonscan.MaxDepth is refused at intake even when the configured
// limit is higher: rehydrate walks members with jsonscan and no longer scans them again.
func TestDecodeCreateBoundsMemberNesting(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	if _, err := decodeCreate([]byte(`{"model":"m","input":"x","stop":`+deep(jsonscan.MaxDepth)+`}`), 1000); err != nil {
		t.Fatalf("a member at the limit: %v", err)
	}
	_, err := decodeCreate([]byte(`{"model":"m","input":"x","stop":`+deep(jsonscan.MaxDepth+1)+`}`), 1000)
	var ae *wire.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "nesting_too_deep" || !strings.HasPrefix(ae.Param, "stop") {
		t.Fatalf("a member one level past: %v", err)
	}
}
