package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/wire"
)

// compactMembers are the members of a compact body (CompactResponseMethodPublicBody) passed on
// to the create decoder; others are ignored, as create ignores unknown members.
var compactMembers = []string{"model", "input", "previous_response_id", "instructions", "prompt_cache_key"}

// compactResponse serves POST /v1/responses/compact (docs/compaction.md): the engine plans and
// summarises the session (engine.Engine.Compact); this door decodes the body and renders the
// answer.
func (s *Server) compactResponse(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	members, err := scanCreate(body, s.cfg.MaxJSONDepth)
	if err != nil {
		return err
	}
	kept := map[string]json.RawMessage{"store": json.RawMessage("false")}
	for _, k := range compactMembers {
		if v, ok := members[k]; ok {
			kept[k] = v
		}
	}
	req, err := createFromMembers(kept)
	if err != nil {
		return err
	}
	req.Store = true // read the chain from the store, never a socket's cache
	spec, err := req.spec(tenant(c))
	if err != nil {
		return err
	}
	out, err := s.engine.Compact(c.Request().Context(), spec)
	if err != nil {
		return err
	}
	b := make([]byte, 0, 1024)
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, out.ID)
	b = append(b, `,"object":"response.compaction","created_at":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"output":[`...)
	for i, it := range out.Output {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendRaw(b, it.JSON)
	}
	b = append(b, `],"usage":`...)
	b = wire.AppendRaw(b, out.Usage)
	b = append(b, '}')
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}
