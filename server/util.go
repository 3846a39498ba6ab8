package server

import (
	"bytes"
	"encoding/json"
)

// jsonMarshal encodes v without HTML escaping (prompts often hold <, > and &).
func jsonMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
