package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/wire"
)

// This file is the intake of request bodies and path ids: what every handler may assume about
// them before it decodes a member, calls upstream or writes to the store (docs/design.md §1 invariant 7).
//
//   - Bodies are read once, into a buffer sized from Content-Length, while the bytes they hold
//     are charged to a server-wide budget (Config.MaxBodyBytesInFlight).
//   - One jsontext pass over a JSON body checks syntax, UTF-8 (escaped lone surrogates too), NUL
//     in strings and names, and nesting depth, and splits the top-level members without copying.
//     Postgres rejects invalid UTF-8 (SQLSTATE 22021) and \u0000 in jsonb, and SQLite stores
//     them as sent, so without this pass the two backends disagree and Postgres answers 500
//     after the model ran.
//   - Path ids must be UTF-8 without control characters (Postgres text rejects 0x00).

// readBody reads the request body whole. With a Content-Length the buffer is allocated once at
// that size (io.ReadAll would double its way there and leave up to twice the body as garbage).
func readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	var body []byte
	var err error
	if n := r.ContentLength; n > 0 {
		body = make([]byte, n)
		_, err = io.ReadFull(r.Body, body) // net/http ends the body at Content-Length
	} else {
		var b bytes.Buffer
		_, err = b.ReadFrom(r.Body)
		body = b.Bytes()
	}
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, echo.NewHTTPError(http.StatusRequestEntityTooLarge)
		}
		return nil, err
	}
	return body, nil
}

// readCreate reads and validates a POST /v1/responses body: one read, one scan, and members
// that alias the body instead of copies of it.
func (s *Server) readCreate(c echo.Context) (*createRequest, error) {
	body, err := readBody(c)
	if err != nil {
		return nil, err
	}
	return decodeCreate(body, s.cfg.MaxJSONDepth)
}

var errNotObject = wire.Invalid("", "invalid_json", "The request body must be a JSON object.")

// scanObject makes one pass over a JSON body with jsontext and returns its top-level members as
// slices of body (nothing is copied; the caller keeps body alive while it uses them). It rejects,
// with a 400 whose param names the place in OpenAI's style (input[0].content[1].text):
// invalid JSON or a body that is not an object (invalid_json); invalid UTF-8, an escaped lone
// surrogate or NUL in any string or object name (invalid_value); nesting deeper than maxDepth
// (nesting_too_deep). Duplicate names are allowed, the last one wins, as with encoding/json.
func scanObject(body []byte, maxDepth int) (map[string]json.RawMessage, error) {
	// AllowInvalidUTF8 so that string checks are ours and can name the member; the decoder still
	// rejects every syntax error. A *bytes.Buffer makes the decoder parse body in place.
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if dec.PeekKind() != '{' {
		if _, err := dec.ReadToken(); err != nil && !errors.Is(err, io.EOF) {
			return nil, syntaxError(dec, err)
		}
		return nil, errNotObject
	}
	members := map[string]json.RawMessage{}
	var name string
	var nameEnd int64
	for {
		kind := dec.PeekKind()
		var err error
		switch kind {
		case '{', '[':
			if _, err = dec.ReadToken(); err == nil && dec.StackDepth() > maxDepth {
				return nil, wire.Invalid(paramOf(dec, dec.StackPointer()), "nesting_too_deep",
					"The request body nests JSON deeper than %d levels.", maxDepth)
			}
		case '}', ']':
			_, err = dec.ReadToken()
		case '"':
			var v jsontext.Value
			if v, err = dec.ReadValue(); err == nil {
				if msg := badString(v); msg != "" {
					p := paramOf(dec, dec.StackPointer())
					return nil, wire.Invalid(p, "invalid_value", "Invalid value for '%s': %s", p, msg)
				}
				if _, n := dec.StackIndex(1); dec.StackDepth() == 1 && n%2 == 1 {
					// A top-level member name: remember it and where its value starts.
					name, nameEnd = unquoteName(v), dec.InputOffset()
					continue
				}
			}
		default:
			_, err = dec.ReadValue()
		}
		if err != nil {
			return nil, syntaxError(dec, err)
		}
		switch dec.StackDepth() {
		case 0: // the closing brace of the body
			if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
				return nil, syntaxError(dec, err)
			}
			return members, nil
		case 1:
			if kind == '{' || kind == '[' {
				continue // a top-level member's value has just begun
			}
			// A top-level member's value has just ended.
			members[name] = bytes.TrimLeft(body[nameEnd:dec.InputOffset()], " \t\r\n:")
		}
	}
}

// unquoteName decodes a member name that badString has accepted.
func unquoteName(v []byte) string {
	b, _ := jsontext.AppendUnquote(nil, v)
	return string(b)
}

// badString says what is wrong with a JSON string literal that Postgres (and so respgate, on
// either backend) cannot store, or "" when nothing is.
func badString(v []byte) string {
	if !utf8.Valid(v) {
		return "the text is not valid UTF-8."
	}
	if !bytes.Contains(v, []byte(`\u`)) && !bytes.Contains(v, []byte(`\U`)) {
		return "" // the fast path: no escapes that could hide a NUL or a lone surrogate
	}
	u, err := jsontext.AppendUnquote(nil, v)
	switch {
	case err != nil:
		return "the text has an unpaired UTF-16 surrogate escape."
	case bytes.IndexByte(u, 0) >= 0:
		return "the text contains a NUL character (\\u0000)."
	}
	return ""
}

// syntaxError is the 400 for a body jsontext cannot parse, naming where it stopped.
func syntaxError(dec *jsontext.Decoder, err error) error {
	var se *jsontext.SyntacticError
	p := ""
	if errors.As(err, &se) {
		p = paramOf(dec, se.JSONPointer)
	}
	if p == "" {
		return wire.Invalid("", "invalid_json", "The request body is not valid JSON.")
	}
	return wire.Invalid(p, "invalid_json", "The request body is not valid JSON (at '%s').", p)
}

// paramOf converts a JSON Pointer into the decoder's current value to OpenAI's param style:
// "/input/0/content/1/text" becomes "input[0].content[1].text". Whether a token is an array
// index or a member name comes from the decoder's stack, not from how the token looks.
func paramOf(dec *jsontext.Decoder, ptr jsontext.Pointer) string {
	var b strings.Builder
	level := 1
	for tok := range ptr.Tokens() {
		kind := jsontext.Kind(0)
		if level <= dec.StackDepth() {
			kind, _ = dec.StackIndex(level)
		}
		if _, err := strconv.Atoi(tok); err == nil && kind == '[' {
			b.WriteString("[" + tok + "]")
		} else {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
		}
		level++
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}

// validID reports whether a client-sent id can be looked up on every backend (wire.ValidID):
// valid UTF-8 with no control characters (no id respgate mints has any).
func validID(id string) bool { return wire.ValidID(id) }

func invalidID(param string) error {
	return wire.Invalid(param, "invalid_value",
		"Invalid '%s': an id must be valid UTF-8 without control characters.", param)
}

// pathIDMiddleware rejects a path id (:id, :item_id) that validID refuses with a 400 naming it
// (response_id, conversation_id, item_id), before the handler reaches the store.
func (s *Server) pathIDMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		for _, n := range c.ParamNames() {
			if validID(c.Param(n)) {
				continue
			}
			param := n
			if n == "id" {
				param = "response_id"
				if strings.HasPrefix(c.Path(), "/v1/conversations") {
					param = "conversation_id"
				}
			}
			return invalidID(param)
		}
		return next(c)
	}
}
