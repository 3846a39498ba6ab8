package vllmsim

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// The simulator writes its JSON by hand: vLLM serialises pydantic models, so the key order is the
// models' field order (alphabetical for openai-python's event types), output is compact, non-ASCII
// stays raw and "<>&" are not escaped (pydantic's model_dump_json; starlette's JSONResponse uses
// json.dumps(ensure_ascii=False, separators=(",", ":"))). encoding/json would reorder and escape.
// Strings go through wire.AppendString, which quotes them as pydantic does: only '"', '\\' and
// control characters escaped (\b \f \n \r \t short), invalid UTF-8 as U+FFFD.

// appendPyFloat appends f the way Python's repr prints a float: always with a fraction or an
// exponent ("1.0", "0.7", "1e-05").
func appendPyFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	if f == 0 || (abs >= 1e-4 && abs < 1e16) {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		b = append(b, s...)
		if !strings.ContainsAny(s, ".") {
			b = append(b, ".0"...)
		}
		return b
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // 1e-05 in Python, 1e-05 here too
	return append(b, s...)
}

// appendRaw appends raw JSON from the request, compacted; def when raw is absent.
func appendRaw(b []byte, raw json.RawMessage, def string) []byte {
	if len(raw) == 0 {
		return append(b, def...)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return append(b, def...)
	}
	return append(b, buf.Bytes()...)
}

func appendBool(b []byte, v bool) []byte { return strconv.AppendBool(b, v) }

func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }
