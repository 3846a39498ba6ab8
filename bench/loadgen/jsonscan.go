package loadgen

import (
	"bytes"
	"errors"

	"github.com/respgate/respgate/internal/jsonscan"
)

// eventFields holds the raw JSON values of the top-level members of an event that the Checker
// reads. A nil slice means the member is absent. Values alias the event's data.
type eventFields struct {
	typ, seq, itemID, outputIndex, contentIndex, delta, item, response []byte
}

var errBadJSON = errors.New("loadgen: event data is not a JSON object")

// scanEvent fills f from the top-level members of the JSON object data without decoding the
// nested values it does not need: at thousands of events per second the client must stay cheaper
// than the servers it measures. It reads events with internal/jsonscan, the scanner the gateway
// itself uses, so the load generator holds a stream to the same JSON rules (syntax, nesting,
// UTF-8) as respgate; a malformed or truncated object is an error.
func scanEvent(data []byte, f *eventFields) error {
	*f = eventFields{}
	o := jsonscan.NewObj(data, 0, 0)
	for m, more := o.Next(); more; m, more = o.Next() {
		v := m.Val.Bytes(data)
		switch string(key(data, m)) {
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
	}
	if o.Finish() != nil {
		return errBadJSON
	}
	return nil
}

// key returns a member's name, decoded (escaped names are rare and cost an allocation).
func key(data []byte, m jsonscan.Member) []byte {
	if m.Key.F&jsonscan.Escaped == 0 {
		return m.Key.Inner(data)
	}
	return jsonscan.AppendUnescaped(nil, m.Key.Inner(data))
}

// member returns the raw value of the top-level member key of the JSON object data (nil if
// absent or data is not an object). data is a value scanEvent has validated.
func member(data []byte, name string) []byte {
	o := jsonscan.NewObj(data, 0, 0)
	for m, more := o.Next(); more; m, more = o.Next() {
		if string(key(data, m)) == name {
			return m.Val.Bytes(data)
		}
	}
	return nil
}

// jsonString decodes a raw JSON string value; ok is false if raw is not a string.
func jsonString(raw []byte) (string, bool) {
	c, ok := jsonscan.StrContents(raw)
	if !ok {
		return "", false
	}
	if bytes.IndexByte(c, '\\') < 0 {
		return string(c), true
	}
	return string(jsonscan.AppendUnescaped(nil, c)), true
}

// appendJSONString appends the decoded JSON string raw to dst.
func appendJSONString(dst []byte, raw []byte) ([]byte, bool) {
	c, ok := jsonscan.StrContents(raw)
	if !ok {
		return dst, false
	}
	return jsonscan.AppendUnescaped(dst, c), true
}

// jsonInt decodes a raw JSON integer (one that fits an int64 exactly).
func jsonInt(raw []byte) (int64, bool) {
	n, ok, huge := jsonscan.Int(raw)
	return n, ok && !huge
}
