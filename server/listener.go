package server

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/respgate/respgate/wire"
)

// Listener wraps the listener respgate serves on so that the requests net/http refuses before any
// handler runs (a request line it cannot parse, such as a path with a malformed %-escape, or a
// malformed header) are answered with the JSON envelope like every other refusal (issue 38
// item 11), instead of net/http's plain text. net/http writes those answers straight to the
// connection in one write of a fixed shape ("HTTP/1.1 <status>" + its text/plain headers +
// "<status>"), which no handler's response has (a handler's carries Date and Content-Length);
// only that write is rewritten.
func Listener(ln net.Listener) net.Listener { return envelopeListener{ln} }

type envelopeListener struct{ net.Listener }

func (l envelopeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return envelopeConn{c}, nil
}

type envelopeConn struct{ net.Conn }

// plainErrorHeaders are the headers net/http's server writes with its own error answers.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c envelopeConn) Write(p []byte) (int, error) {
	if out, ok := envelopeAnswer(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// envelopeAnswer rewrites one of net/http's own error answers ("HTTP/1.1 400 Bad Request" +
// plainErrorHeaders + "400 Bad Request", possibly with ": reason" after both status texts) as the
// same status with the envelope; ok is false for anything else.
func envelopeAnswer(p []byte) (out []byte, ok bool) {
	rest, found := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !found {
		return nil, false
	}
	status, body, found := bytes.Cut(rest, []byte(plainErrorHeaders))
	if !found || !bytes.Equal(status, body) || len(status) < 4 || status[3] != ' ' {
		return nil, false
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	// The reason net/http gives after the status text, if any, is about the request's syntax.
	msg := http.StatusText(code)
	if _, reason, ok := strings.Cut(string(status[4:]), ": "); ok && reason != "" {
		msg += ": " + reason
	}
	ae := &wire.APIError{Status: code, Type: wire.ErrInvalidRequest, Message: msg + "."}
	if code >= 500 {
		ae.Type = wire.ErrServer
	}
	env := ae.Envelope()
	out = make([]byte, 0, 128+len(env))
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(code), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(code)...)
	out = append(out, "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(env)), 10)
	out = append(out, "\r\n\r\n"...)
	return append(out, env...), true
}
