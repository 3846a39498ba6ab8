package server

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/wire"
)

// The POST /v1/responses front door: decode the request into an engine.Spec, run it through
// the engine, render what comes back (docs/design.md §1).

// createResponse serves POST /v1/responses.
func (s *Server) createResponse(c echo.Context) error {
	req, err := s.readCreate(c)
	if err != nil {
		return err
	}
	if req.echo.Background {
		req.body.Stream = true // its worker streams from vLLM into the event log (docs/background.md)
	}
	spec, err := req.spec(tenant(c))
	if err != nil {
		return err
	}
	out, err := s.engine.Serve(c.Request().Context(), spec, &httpDoor{s: s, c: c})
	switch {
	case err != nil:
		return err
	case spec.Background && spec.Stream:
		return s.followBackground(c, out)
	case spec.Stream:
		return nil // the stream has been written
	}
	b := engine.RenderResponse(make([]byte, 0, 1024), &out.Response, out.Visible())
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}

// httpDoor is an HTTP turn's engine.Door: the turn's headers, and an SSE stream.
type httpDoor struct {
	s *Server
	c echo.Context
}

func (d *httpDoor) Prepared(p engine.Prepared) {
	h := d.c.Response().Header()
	if len(p.DroppedTools) > 0 {
		h.Set("X-Respgate-Dropped-Tools", strings.Join(p.DroppedTools, ","))
	}
	if p.Truncated > 0 {
		h.Set("X-Respgate-Truncated-Items", strconv.Itoa(p.Truncated))
	}
}

func (d *httpDoor) Open() engine.Sink { return d.s.openStream(d.c) }

// followBackground follows a just-queued background response's event log live until its
// terminal event (stream:true); shutdown's deadline ends the follow as it cuts a live stream.
func (s *Server) followBackground(c echo.Context, out *engine.Outcome) error {
	fctx, cancel := context.WithCancel(c.Request().Context())
	stop := context.AfterFunc(s.engine.StoppingContext(), cancel)
	defer func() { stop(); cancel() }()
	c.SetRequest(c.Request().WithContext(fctx))
	return s.streamStored(c, &out.Response, nil, -1)
}

// openStream sends the headers of an event stream and returns its writer.
func (s *Server) openStream(c echo.Context) *sseWriter {
	res := c.Response()
	h := res.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	res.WriteHeader(http.StatusOK)
	return newSSEWriter(res, s.cfg.WriteTimeout)
}

// readView is the item view of a read route (GET of a response, input_items, conversation
// items): the exposure policy, and include=reasoning.encrypted_content in the query (include or
// include[], as the SDKs send it) to mint blobs for items stored without one.
func readView(e *engine.Engine, c echo.Context) engine.ItemView {
	q := c.QueryParams()
	include := slices.Contains(q["include"], wire.IncludeEncryptedReasoning) || slices.Contains(q["include[]"], wire.IncludeEncryptedReasoning)
	return e.View(tenant(c), include)
}
