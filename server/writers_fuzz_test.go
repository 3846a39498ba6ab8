package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// hostile are strings that a writer quoting the Go way (strconv.AppendQuote), or passing stored
// bytes through unchecked, turns into invalid JSON or invalid UTF-8.
var hostile = []string{
	"msg_a\u0007b", "\x00", "nul\x00in", "\x1f\x7f", "tab\tnl\nret\r", `quote"back\slash`, `\u0000`, `\ud800`,
	"\u2028line\u2029para", "bad\xffutf8", "\xc3\x28", "\xed\xa0\x80", "trunc\xe2\x82", "</script><!--&", "\U0001F600",
	"", "in_progress",
}

// lenient quotes s the way a store could hold it: JSON-escaped quotes, backslashes and control
// characters, every other byte (invalid UTF-8 included) as it is. SQLite kept request bytes so
// before requests were checked for UTF-8.
func lenient(s string) []byte {
	b := []byte{'"'}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func obj(kv ...any) []byte {
	b := []byte{'{'}
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(b, lenient(kv[i].(string))...), ':')
		switch v := kv[i+1].(type) {
		case string:
			b = append(b, lenient(v)...)
		case []byte:
			b = append(b, v...)
		}
	}
	return append(b, '}')
}

// checkJSON fails the test unless out is valid JSON (encoding/json's grammar) and valid UTF-8.
func checkJSON(t *testing.T, writer string, out []byte) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("%s wrote invalid JSON: %.400q", writer, out)
	}
	if !utf8.Valid(out) {
		t.Fatalf("%s wrote invalid UTF-8: %.400q", writer, out)
	}
}

// FuzzWritersEmitValidJSON drives every writer of JSON respgate builds by hand with hostile
// strings in ids, statuses, error messages, metadata and stored item JSON, and checks that each
// output parses and is valid UTF-8.
func FuzzWritersEmitValidJSON(f *testing.F) {
	for i, s := range hostile {
		f.Add(s, hostile[(i+1)%len(hostile)], hostile[(i+2)%len(hostile)], hostile[(i+3)%len(hostile)])
	}
	f.Add("resp_1", "completed", "fine", "text")
	srv := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e := echo.New()
	f.Fuzz(func(t *testing.T, id, status, msg, text string) {
		items := []wire.Item{
			{ID: id, Type: wire.TypeMessage, JSON: obj("type", "message", "id", id, "status", status, "role", "assistant",
				"content", []byte(`[`+string(obj("type", "output_text", "text", text, "annotations", []byte("[]")))+`,`+
					string(obj("type", "refusal", "refusal", msg))+`]`))},
			{ID: id, Type: wire.TypeReasoning, JSON: obj("type", "reasoning", "id", id, "summary",
				[]byte(`[`+string(obj("type", "summary_text", "text", msg))+`]`), "content",
				[]byte(`[`+string(obj("type", "reasoning_text", "text", text))+`]`), "encrypted_content", msg)},
			{ID: id, Type: wire.TypeFunctionCall, JSON: obj("type", "function_call", "id", id, "call_id", status, "name", text, "arguments", msg)},
			{ID: id, Type: text, JSON: obj("type", text, "id", id, text, msg)},
		}
		meta := obj(text, msg, "k", id)
		for _, st := range []wire.Status{wire.Status(status), wire.StatusCompleted, wire.StatusFailed, wire.StatusIncomplete} {
			r := &store.Response{ID: id, Status: st, Model: text, CreatedAt: time.Unix(1, 0), CompletedAt: new(time.Unix(2, 0)),
				Echo:  obj("model", text, "metadata", meta, "instructions", msg, "previous_response_id", id),
				Error: obj("code", status, "message", msg), IncompleteDetails: obj("reason", msg), Usage: obj("note", text)}
			checkJSON(t, "renderResponse", engine.RenderResponse(nil, r, items))
			sse, err := replayEvents(nil, r, items, -1)
			if err != nil {
				continue // an item whose parts are not what its type says: refused, nothing written
			}
			if !utf8.Valid(sse) {
				t.Fatalf("replayEvents wrote invalid UTF-8: %.400q", sse)
			}
			for _, frame := range strings.Split(strings.TrimSuffix(string(sse), "\n\n"), "\n\n") {
				if frame == "" {
					continue
				}
				typ, data, ok := strings.Cut(frame, "\ndata: ")
				if !ok || !strings.HasPrefix(typ, "event: ") || strings.Contains(data, "\n") {
					t.Fatalf("replayEvents wrote a malformed frame: %q", frame)
				}
				checkJSON(t, "replayEvents "+typ, []byte(data))
			}
		}
		checkJSON(t, "renderList", renderList(&store.ItemPage{Items: items, HasMore: true}))
		checkJSON(t, "renderList (empty)", renderList(&store.ItemPage{}))
		checkJSON(t, "renderConversation", renderConversation(&store.Conversation{ID: id, CreatedAt: time.Unix(1, 0), Metadata: meta}))

		// The error envelope, written by the one error handler.
		for _, err := range []error{
			&wire.APIError{Status: http.StatusBadRequest, Type: status, Code: text, Param: id, Message: msg},
			wire.NotFound("response_id", "Response with id '%s' not found.", id),
			wire.Invalid(id, "invalid_value", "Invalid value for '%s': %s", id, msg),
		} {
			rec := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(http.MethodGet, "/v1/responses/x", nil), rec)
			srv.errorHandler(err, c)
			checkJSON(t, "errorHandler", rec.Body.Bytes())
		}
	})
}

func TestWritersQuoteIDsAsJSON(t *testing.T) {
	// The case from the issue: strconv.AppendQuote wrote "msg_a\ab".
	page := &store.ItemPage{Items: []wire.Item{{ID: "msg_a\u0007b", Type: wire.TypeMessage, JSON: []byte(`{"id":"msg_a\u0007b"}`)}}}
	out := renderList(page)
	var v struct {
		FirstID string `json:"first_id"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.FirstID != "msg_a\u0007b" {
		t.Fatalf("renderList: %q (%v)", out, err)
	}
	// Invalid UTF-8 held by the store comes out as U+FFFD.
	cv := renderConversation(&store.Conversation{ID: "conv_\xff", Metadata: []byte("{\"k\":\"a\xffb\"}")})
	if !bytes.Contains(cv, []byte(`"conv_`+"\uFFFD"+`"`)) || !bytes.Contains(cv, []byte("a\uFFFDb")) || !utf8.Valid(cv) {
		t.Fatalf("renderConversation: %q", cv)
	}
}
