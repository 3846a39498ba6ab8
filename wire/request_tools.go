package wire

import (
	"encoding/json"
	"fmt"
)

// tools reads "tools": an array of tool objects, each with a string "type"; a function tool needs
// a "name", a namespace tool a "name" and an array of tool objects whose function tools have a
// "name" (docs/wire.md §1.1). Which tools vLLM can serve is rehydrate's policy, not checked here.
func (m requestMembers) tools() ([]Tool, error) {
	v := m.get("tools")
	if v == nil {
		return nil, nil
	}
	var raw []json.RawMessage
	if json.Unmarshal(v, &raw) != nil {
		return nil, toolsTypeError()
	}
	elems := make([]map[string]json.RawMessage, len(raw))
	for i, e := range raw {
		if json.Unmarshal(e, &elems[i]) != nil {
			return nil, toolsTypeError()
		}
	}
	tools := make([]Tool, len(elems))
	for i, t := range elems {
		tools[i] = Tool{Type: stringOrEmpty(t["type"]), Name: stringOrEmpty(t["name"]), JSON: raw[i]}
		if tools[i].Type == "" {
			return nil, Invalid("tools", "invalid_value", "tools[%d]: missing 'type'.", i)
		}
		if tools[i].Type == "function" && tools[i].Name == "" {
			return nil, Invalid("tools", "invalid_value", "tools[%d]: a function tool needs a 'name'.", i)
		}
	}
	// The namespace tools' own checks come after every tool's type and name, so a body with
	// faults of both kinds gets the same 400 as before the checks moved here.
	for i := range tools {
		if tools[i].Type != "namespace" {
			continue
		}
		inner, err := namespaceTools(elems[i], fmt.Sprintf("tools[%d]", i))
		if err != nil {
			return nil, err
		}
		tools[i].Tools = inner
	}
	return tools, nil
}

func toolsTypeError() error {
	return Invalid("tools", "invalid_type", "'tools' must be an array of tool objects.")
}

// namespaceTools checks a namespace tool (named param) and returns its tools.
func namespaceTools(t map[string]json.RawMessage, param string) ([]Tool, error) {
	if stringOrEmpty(t["name"]) == "" {
		return nil, Invalid(param+".name", "missing_required_parameter", "A namespace tool ('%s') needs a non-empty string 'name'.", param)
	}
	var raw []json.RawMessage
	if json.Unmarshal(t["tools"], &raw) != nil || raw == nil {
		return nil, Invalid(param+".tools", "invalid_type", "Invalid type for '%s.tools': expected an array of tools.", param)
	}
	inner := make([]Tool, len(raw))
	for j, e := range raw {
		sub := fmt.Sprintf("%s.tools[%d]", param, j)
		var f map[string]json.RawMessage
		if json.Unmarshal(e, &f) != nil || f == nil {
			return nil, Invalid(sub, "invalid_type", "Invalid type for '%s': expected an object.", sub)
		}
		inner[j] = Tool{Type: stringOrEmpty(f["type"]), Name: stringOrEmpty(f["name"]), JSON: e}
		if inner[j].Type == "function" && inner[j].Name == "" {
			return nil, Invalid(sub+".name", "missing_required_parameter", "The function tool '%s' needs a non-empty string 'name'.", sub)
		}
	}
	return inner, nil
}

// stringOrEmpty returns the string v holds, or "" when v is absent or not a string.
func stringOrEmpty(v json.RawMessage) string {
	if s := optionalString(v); s != nil {
		return *s
	}
	return ""
}
