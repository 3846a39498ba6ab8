package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

func responseNotFound(id string) error {
	return wire.NotFound("response_id", "Response with id '%s' not found.", id)
}

func (s *Server) loadResponse(c echo.Context) (*store.Response, []wire.Item, error) {
	id := c.Param("id")
	r, out, err := s.store.ResponseGet(c.Request().Context(), &store.ResponseGetParams{Tenant: tenant(c), ID: id})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, responseNotFound(id)
	}
	return r, out, err
}

// getResponse serves GET /v1/responses/{id}; with stream=true in the query, or (as openai-go's
// GetStreaming sends it) "stream":true in a JSON body of the GET, it replays the stored response as
// an event stream after starting_after (docs/wire.md §1.2).
func (s *Server) getResponse(c echo.Context) error {
	stream, err := wantsStream(c)
	if err != nil {
		return err
	}
	after := int64(-1)
	if v := c.QueryParam("starting_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return wire.Invalid("starting_after", "invalid_value", "'starting_after' must be a non-negative integer.")
		}
		after = n
	}
	r, out, err := s.loadResponse(c)
	if err != nil {
		return err
	}
	out = readView(s.engine, c).Items(out)
	if !stream {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, engine.RenderResponse(make([]byte, 0, 1024), r, out))
	}
	return s.streamStored(c, r, out, after)
}

func wantsStream(c echo.Context) (bool, error) {
	if v := c.QueryParam("stream"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, wire.Invalid("stream", "invalid_value", "'stream' must be true or false.")
		}
		return b, nil
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, 1<<16))
	if err != nil || len(body) == 0 {
		return false, nil
	}
	var v struct {
		Stream bool `json:"stream"`
	}
	if json.Unmarshal(body, &v) != nil {
		return false, nil
	}
	return v.Stream, nil
}

func (s *Server) deleteResponse(c echo.Context) error {
	id := c.Param("id")
	err := s.store.ResponseDelete(c.Request().Context(), &store.ResponseDeleteParams{Tenant: tenant(c), ID: id, Now: time.Now()})
	if errors.Is(err, store.ErrNotFound) {
		return responseNotFound(id)
	}
	if errors.Is(err, store.ErrConflict) {
		// Deleting a response while it streams would let its commit bring it back; the delete is
		// refused until it has finished (docs/clients.md).
		return wire.Conflict("response_id", "response_in_progress", "Response '%s' is in progress; delete it when it has finished.", id)
	}
	if err != nil {
		return err
	}
	return deleted(c, id, "response.deleted")
}

func (s *Server) cancelResponse(c echo.Context) error {
	r, _, err := s.loadResponse(c)
	if err != nil {
		return err
	}
	var echo struct {
		Background bool `json:"background"`
	}
	if json.Unmarshal(r.Echo, &echo) == nil && echo.Background {
		return s.cancelBackground(c, r) // docs/background.md
	}
	return wire.Invalid("response_id", "response_not_cancellable", "Cannot cancel a synchronous response.")
}

// listInputItems serves GET /v1/responses/{id}/input_items: the items used to generate the
// response, i.e. the context the model saw (for a continuation: the earlier turns' inputs and
// outputs, then this turn's input), paginated (docs/clients.md).
func (s *Server) listInputItems(c echo.Context) error {
	pg, err := pageParams(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	items, err := s.inputItems(c.Request().Context(), tenant(c), id)
	if err != nil {
		return err
	}
	page, err := paginate(readView(s.engine, c).Items(items), pg)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderList(page))
}

// inputItems are the items response id was generated from. A previous_response_id chain is read
// whole (one round trip), so that a chain with a deleted ancestor is the clear 400 continuing it
// is (issue 38 item 9), instead of a list that silently starts at the gap; a conversation turn's
// context is the conversation's items before it (ResponseContextGet).
func (s *Server) inputItems(ctx context.Context, tn, id string) ([]wire.Item, error) {
	chain, err := s.store.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tn, ID: id})
	if errors.Is(err, store.ErrNotFound) {
		return nil, responseNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	last := chain.Turns[len(chain.Turns)-1]
	if last.Response.ConversationID != "" {
		items, err := s.store.ResponseContextGet(ctx, &store.ResponseContextGetParams{Tenant: tn, ID: id})
		if errors.Is(err, store.ErrNotFound) {
			return nil, responseNotFound(id) // deleted between the two reads
		}
		return items, err
	}
	if chain.Missing != "" {
		return nil, wire.Invalid("response_id", "previous_response_not_found",
			"The input items of response '%s' cannot be listed: its ancestor '%s' was deleted.", id, chain.Missing)
	}
	var items []wire.Item
	for _, t := range chain.Turns[:len(chain.Turns)-1] {
		items = append(items, t.Input...)
		items = append(items, t.Output...)
	}
	return append(items, last.Input...), nil
}

// paginate cuts one page out of a whole ordered list: in pg's order, after the item pg.after
// names, at most pg.limit items.
func paginate(items []wire.Item, pg pageQuery) (*store.ItemPage, error) {
	ordered := items
	if pg.order == store.OrderDesc {
		ordered = make([]wire.Item, len(items))
		for i, it := range items {
			ordered[len(items)-1-i] = it
		}
	}
	if pg.after != "" {
		i := slices.IndexFunc(ordered, func(it wire.Item) bool { return it.ID == pg.after })
		if i < 0 {
			return nil, wire.Invalid("after", "invalid_value", "No item with id '%s' in this list.", pg.after)
		}
		ordered = ordered[i+1:]
	}
	page := &store.ItemPage{Items: ordered, HasMore: len(ordered) > pg.limit}
	if page.HasMore {
		page.Items = ordered[:pg.limit]
	}
	return page, nil
}

type pageQuery struct {
	after string
	limit int
	order store.Order
}

func pageParams(c echo.Context) (pageQuery, error) {
	p := pageQuery{after: c.QueryParam("after"), limit: 20, order: store.OrderDesc}
	if !validID(p.after) {
		return p, invalidID("after")
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return p, wire.Invalid("limit", "invalid_value", "'limit' must be an integer between 1 and 100.")
		}
		p.limit = n
	}
	switch v := c.QueryParam("order"); v {
	case "", "desc":
	case "asc":
		p.order = store.OrderAsc
	default:
		return p, wire.Invalid("order", "invalid_value", "'order' must be 'asc' or 'desc'.")
	}
	return p, nil
}

// renderList writes the list object {"object":"list","data","first_id","last_id","has_more"}.
func renderList(page *store.ItemPage) []byte {
	b := make([]byte, 0, 256)
	b = append(b, `{"object":"list","data":[`...)
	for i, it := range page.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendRaw(b, it.JSON)
	}
	b = append(b, `],"first_id":`...)
	if n := len(page.Items); n > 0 {
		b = wire.AppendString(b, page.Items[0].ID)
		b = append(b, `,"last_id":`...)
		b = wire.AppendString(b, page.Items[n-1].ID)
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, page.HasMore)
	return append(b, '}')
}

// getModel answers GET /v1/models/{id} (the SDKs' models.retrieve) with the entry of the
// upstream's list (an aggregated fleet's, or vLLM's, which has no such route), or 404
// model_not_found. The id may hold slashes.
func (s *Server) getModel(c echo.Context) error {
	id, err := url.PathUnescape(c.Param("*"))
	if err != nil || id == "" {
		return modelNotFound(id)
	}
	raw, err := s.up.Models(c.Request().Context())
	if err != nil {
		return err
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return &upstream.Error{Kind: upstream.KindBadBody, Status: http.StatusOK, Message: "model list is not a JSON list"}
	}
	for _, m := range list.Data {
		var e struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &e) == nil && e.ID == id {
			return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, m)
		}
	}
	return modelNotFound(id)
}

// modelNotFound is OpenAI's 404 for an unknown model id in a path.
func modelNotFound(id string) error {
	return &wire.APIError{Status: http.StatusNotFound, Type: wire.ErrInvalidRequest, Code: "model_not_found", Param: "model",
		Message: "The model `" + id + "` does not exist."}
}

// listModels proxies the upstream's model list (a fleet's is aggregated, upstream/fleet).
func (s *Server) listModels(c echo.Context) error {
	raw, err := s.up.Models(c.Request().Context())
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, raw)
}

// cancelBackground serves POST /v1/responses/{id}/cancel of a background response
// (engine.Engine.CancelBackground) and answers the response as stored afterwards.
func (s *Server) cancelBackground(c echo.Context, r *store.Response) error {
	ctx, id := c.Request().Context(), r.ID
	err := s.engine.CancelBackground(ctx, r.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return responseNotFound(id)
	}
	if err != nil {
		return err
	}
	r, out, err := s.store.ResponseGet(ctx, &store.ResponseGetParams{Tenant: r.Tenant, ID: id})
	if errors.Is(err, store.ErrNotFound) {
		return responseNotFound(id)
	}
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, engine.RenderResponse(make([]byte, 0, 1024), r, readView(s.engine, c).Items(out)))
}
