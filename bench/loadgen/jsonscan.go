package loadgen

import (
	"encoding/json"
	"errors"
	"strconv"
)

// eventFields holds the raw JSON values of the top-level members of an event that the Checker
// reads. A nil slice means the member is absent. Values alias the event's data.
type eventFields struct {
	typ, seq, itemID, outputIndex, contentIndex, delta, item, response []byte
}

var errBadJSON = errors.New("loadgen: event data is not a JSON object")

// scanEvent fills f from the top-level members of the JSON object data without decoding the
// nested values it does not need: at thousands of events per second the client must stay cheaper
// than the servers it measures. It is strict enough to reject truncated or malformed objects.
func scanEvent(data []byte, f *eventFields) error {
	*f = eventFields{}
	return scanObject(data, func(key, v []byte) {
		switch string(key) {
		case "type":
			f.typ = v
		case "sequence_number":
			f.seq = v
		case "item_id":
			f.itemID = v
		case "output_index":
			f.outputIndex = v
		case "content_index":
			f.contentIndex = v
		case "delta":
			f.delta = v
		case "item":
			f.item = v
		case "response":
			f.response = v
		}
	})
}

// member returns the raw value of the top-level member key of the JSON object data (nil if
// absent or data is not an object).
func member(data []byte, key string) []byte {
	var out []byte
	_ = scanObject(data, func(k, v []byte) {
		if out == nil && string(k) == key {
			out = v
		}
	})
	return out
}

// scanObject calls fn with each top-level member (raw key without quotes, raw value) of the JSON
// object data, in order. It returns errBadJSON if data is not one well-formed object (nested
// values are only checked for balanced brackets and strings).
func scanObject(data []byte, fn func(key, val []byte)) error {
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errBadJSON
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		return checkTrailing(data, i+1)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return errBadJSON
		}
		ks := i
		i = skipString(data, i)
		if i < 0 {
			return errBadJSON
		}
		key := data[ks+1 : i-1]
		i = skipWS(data, i)
		if i >= len(data) || data[i] != ':' {
			return errBadJSON
		}
		i = skipWS(data, i+1)
		vs := i
		i = skipValue(data, i)
		if i < 0 {
			return errBadJSON
		}
		fn(key, data[vs:i])
		i = skipWS(data, i)
		if i >= len(data) {
			return errBadJSON
		}
		switch data[i] {
		case ',':
			i = skipWS(data, i+1)
		case '}':
			return checkTrailing(data, i+1)
		default:
			return errBadJSON
		}
	}
}

func checkTrailing(data []byte, i int) error {
	if skipWS(data, i) != len(data) {
		return errBadJSON
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"', or -1.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index after the JSON value starting at b[i], or -1. Objects and arrays
// are skipped by bracket depth (strings inside them are honoured); scalars up to a delimiter.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				if i < 0 {
					return -1
				}
				i--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	default:
		s := i
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' && b[i] != '\r' && b[i] != '\t' {
			i++
		}
		if i == s {
			return -1
		}
		return i
	}
}

// jsonString decodes a raw JSON string value; ok is false if raw is not a string.
func jsonString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			plain = false
			break
		}
	}
	if plain {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// appendJSONString appends the decoded JSON string raw to dst.
func appendJSONString(dst []byte, raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return dst, false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			s, ok := jsonString(raw)
			return append(dst, s...), ok
		}
	}
	return append(dst, inner...), true
}

// jsonInt decodes a raw JSON integer.
func jsonInt(raw []byte) (int64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}
