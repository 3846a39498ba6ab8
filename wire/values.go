package wire

import (
	"bytes"
	"encoding/json"
)

// Small helpers for JSON values as the front doors and the turn engine handle them.

// EmptyArray is the JSON value [].
var EmptyArray = json.RawMessage("[]")

// IsNull reports whether a member is absent (empty) or null.
func IsNull(r json.RawMessage) bool { return len(r) == 0 || bytes.Equal(r, []byte("null")) }

// UnmarshalOpt decodes raw into v; an absent member (or null) leaves v as it is.
func UnmarshalOpt(raw json.RawMessage, v any) error {
	if IsNull(raw) {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// Marshal encodes v without HTML escaping (prompts often hold <, > and &).
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
