package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// conversations is the Conversations API's front door (docs/clients.md): its routes read and
// change the store directly; the engine checks the sealed items they add and shows reasoning
// items as the exposure policy says.
type conversations struct {
	store        store.Store
	engine       *engine.Engine
	maxJSONDepth int
}

// maxConversationItems bounds the items of one create or append call (docs/wire.md §1.8).
const maxConversationItems = 20

func renderConversation(cv *store.Conversation) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, cv.ID)
	b = append(b, `,"object":"conversation","created_at":`...)
	b = strconv.AppendInt(b, cv.CreatedAt.Unix(), 10)
	b = append(b, `,"metadata":`...)
	if len(cv.Metadata) == 0 {
		b = append(b, "{}"...)
	} else {
		b = wire.AppendRaw(b, cv.Metadata)
	}
	return append(b, '}')
}

// readJSONBody reads a conversations body (an empty one is an empty object) and checks it with
// scanObject; the members alias the body.
func (s *conversations) readJSONBody(c echo.Context) (map[string]json.RawMessage, error) {
	body, err := readBody(c)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	return scanObject(body, s.maxJSONDepth)
}

// conversationItems validates and normalises the "items" member: an array of at most 20 items,
// each given an id when it has none and stored losslessly (reasoning sealed by respgate for
// tenant tn: with the plaintext its blob holds).
func (s *conversations) conversationItems(raw json.RawMessage, tn string) ([]wire.Item, error) {
	ring := s.engine.Ring()
	if wire.IsNull(raw) {
		return nil, nil
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' {
		return nil, wire.Invalid("items", "invalid_type", "'items' must be an array of items.")
	}
	in, err := rehydrate.ParseInput(raw)
	if err != nil {
		if ae := new(wire.APIError); errors.As(err, &ae) {
			ae2 := *ae
			if len(ae2.Param) >= 5 && ae2.Param[:5] == "input" {
				ae2.Param = "items" + ae2.Param[5:]
			}
			return nil, &ae2
		}
		return nil, err
	}
	if len(in) > maxConversationItems {
		return nil, wire.Invalid("items", "array_above_max_length", "'items' may have at most %d items; got %d.", maxConversationItems, len(in))
	}
	out := make([]wire.Item, 0, len(in))
	for i, it := range in {
		if it.Type == wire.TypeItemReference {
			return nil, wire.Invalid("items["+strconv.Itoa(i)+"]", "unsupported_item_type", "Item references cannot be added to a conversation.")
		}
		n, err := rehydrate.Normalize(it, wire.NewID)
		if err != nil {
			return nil, wire.Invalid("items["+strconv.Itoa(i)+"]", "invalid_value", "items[%d] is not a valid item.", i)
		}
		// respgate's own encrypted_content is opened and the item stored with its plaintext.
		if n, _, err = rehydrate.OpenSealed(n, ring, tn, "items["+strconv.Itoa(i)+"]"); err != nil {
			return nil, err
		}
		if encryptedOnly(n) {
			// Stored, it would make every later turn of the conversation fail (docs/design.md §5).
			return nil, wire.Invalid("items["+strconv.Itoa(i)+"]", rehydrate.CodeEncryptedReasoning,
				"Reasoning item in 'items[%d]' carries only encrypted_content, which respgate cannot read and vLLM cannot accept; send its plaintext content or omit the item.", i)
		}
		if compact.IsCompaction(n) {
			// Checked as a turn checks it: one that does not open would make every later turn
			// of the conversation a 400 until it was deleted (issue 38 item 5).
			if err := s.engine.CheckCompactionItem(tn, n, "items["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// dedupeItems drops the items of a batch that repeat an earlier item of the batch, or an item the
// conversation already has, byte for byte (a retried call adds nothing twice), and refuses an id
// that names other content (400 item_id_conflict, as the same input on a previous_response_id
// chain is): a conversation must never hold two items with one id, which GET and DELETE of that
// id could not tell apart, and which would both be replayed (issue 38 item 3). The conversation's
// items are looked up by id, one store call per id of the batch; conversationID is "" for a new
// conversation. The look-up alone cannot close the race of two calls adding one id at once:
// ConversationItemAppend checks again inside its transaction, and addConversationItems answers
// its refusal the same way (appendConflict).
func (s *conversations) dedupeItems(ctx context.Context, tn, conversationID string, items []wire.Item) ([]wire.Item, error) {
	seen := make(map[string][]byte, len(items))
	out := items[:0:0]
	for i, it := range items {
		body := compactJSON(it.JSON)
		prior, dup := seen[it.ID]
		if !dup && conversationID != "" {
			stored, err := s.store.ConversationItemGet(ctx, &store.ConversationItemGetParams{Tenant: tn, ConversationID: conversationID, ItemID: it.ID})
			switch {
			case err == nil:
				prior, dup = compactJSON(stored.JSON), true
			case !errors.Is(err, store.ErrNotFound):
				return nil, err
			}
		}
		if !dup {
			seen[it.ID] = body
			out = append(out, it)
			continue
		}
		if !bytes.Equal(prior, body) {
			return nil, itemIDConflict(it.ID, i)
		}
	}
	return out, nil
}

// itemIDConflict is the 400 of items[i], whose id names other content than the conversation's
// item of that id (or an earlier item of the batch).
func itemIDConflict(id string, i int) error {
	return wire.Invalid("items["+strconv.Itoa(i)+"]", rehydrate.CodeItemIDConflict,
		"Item '%s' in 'items[%d]' has the same id as an item of the conversation (or an earlier item of 'items') but different content; an id must always name the same item.",
		wire.Clip(id), i)
}

// appendConflict is the 400 of the store's refusal of kept[ce.Index] (the items dedupeItems
// kept of sent), naming the item's index in the request: another call added that id with other
// content between dedupeItems' look-up and this append (issue 38 item 3), and the answer is the
// one the look-up would have given; or the id is in the input of the turn in progress, whose
// commit will add its own item of that id (ce.InTurn).
func appendConflict(ce *store.ItemIDConflictError, sent, kept []wire.Item) error {
	id := kept[ce.Index].ID
	at := ce.Index
	for i, it := range sent {
		if it.ID == id {
			at = i
			break
		}
	}
	if ce.InTurn {
		return wire.Invalid("items["+strconv.Itoa(at)+"]", rehydrate.CodeItemIDConflict,
			"Item '%s' in 'items[%d]' has the same id as an input item of the response in progress on this conversation but different content; an id must always name the same item.",
			wire.Clip(id), at)
	}
	return itemIDConflict(id, at)
}

func compactJSON(raw []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

func (s *conversations) createConversation(c echo.Context) error {
	body, err := s.readJSONBody(c)
	if err != nil {
		return err
	}
	items, err := s.conversationItems(body["items"], tenant(c))
	if err != nil {
		return err
	}
	if items, err = s.dedupeItems(c.Request().Context(), tenant(c), "", items); err != nil {
		return err
	}
	md, err := validMetadata(body["metadata"], "metadata")
	if err != nil {
		return err
	}
	cv := store.Conversation{ID: wire.NewID(wire.PrefixConversation), Tenant: tenant(c), CreatedAt: time.Now(), Metadata: md}
	if err := s.store.ConversationCreate(c.Request().Context(), &store.ConversationCreateParams{Conversation: cv, Items: items}); err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderConversation(&cv))
}

func (s *conversations) loadConversation(c echo.Context) (*store.Conversation, error) {
	id := c.Param("id")
	cv, err := s.store.ConversationGet(c.Request().Context(), &store.ConversationGetParams{Tenant: tenant(c), ID: id})
	if errors.Is(err, store.ErrNotFound) {
		return nil, wire.NotFound("conversation_id", "Conversation with id '%s' not found.", id)
	}
	return cv, err
}

// requiredMember reads the JSON body and returns its member key (400 when it is missing).
func (s *conversations) requiredMember(c echo.Context, key string) (json.RawMessage, error) {
	body, err := s.readJSONBody(c)
	if err != nil {
		return nil, err
	}
	raw, ok := body[key]
	if !ok {
		return nil, wire.Invalid(key, "missing_required_parameter", "Missing required parameter: '%s'.", key)
	}
	return raw, nil
}

func (s *conversations) getConversation(c echo.Context) error {
	cv, err := s.loadConversation(c)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderConversation(cv))
}

func (s *conversations) updateConversation(c echo.Context) error {
	raw, err := s.requiredMember(c, "metadata")
	if err != nil {
		return err
	}
	md, err := validMetadata(raw, "metadata")
	if err != nil {
		return err
	}
	id := c.Param("id")
	cv, err := s.store.ConversationUpdate(c.Request().Context(), &store.ConversationUpdateParams{Tenant: tenant(c), ID: id, Metadata: md})
	if errors.Is(err, store.ErrNotFound) {
		return wire.NotFound("conversation_id", "Conversation with id '%s' not found.", id)
	}
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderConversation(cv))
}

func (s *conversations) deleteConversation(c echo.Context) error {
	id := c.Param("id")
	err := s.store.ConversationDelete(c.Request().Context(), &store.ConversationDeleteParams{Tenant: tenant(c), ID: id, Now: time.Now()})
	if errors.Is(err, store.ErrNotFound) {
		return wire.NotFound("conversation_id", "Conversation with id '%s' not found.", id)
	}
	if errors.Is(err, store.ErrConflict) {
		// A turn holds the conversation: deleting it now would fail that turn (docs/clients.md).
		return wire.Conflict("conversation_id", "conversation_locked",
			"A response is in progress for conversation '%s'; delete it when that response has finished.", id)
	}
	if err != nil {
		return err
	}
	return deleted(c, id, "conversation.deleted")
}

func (s *conversations) listConversationItems(c echo.Context) error {
	pg, err := pageParams(c)
	if err != nil {
		return err
	}
	if _, err := s.loadConversation(c); err != nil {
		return err
	}
	page, err := s.store.ConversationItemList(c.Request().Context(), &store.ConversationItemListParams{Tenant: tenant(c),
		ConversationID: c.Param("id"), After: pg.after, Limit: pg.limit, Order: pg.order})
	if errors.Is(err, store.ErrNotFound) {
		return wire.Invalid("after", "invalid_value", "No item with id '%s' in this conversation.", pg.after)
	}
	if err != nil {
		return err
	}
	page.Items = readView(s.engine, c).Items(page.Items)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderList(page))
}

func (s *conversations) addConversationItems(c echo.Context) error {
	raw, err := s.requiredMember(c, "items")
	if err != nil {
		return err
	}
	items, err := s.conversationItems(raw, tenant(c))
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return wire.Invalid("items", "array_below_min_length", "'items' must contain at least one item.")
	}
	id := c.Param("id")
	sent := items
	if items, err = s.dedupeItems(c.Request().Context(), tenant(c), id, items); err != nil {
		return err
	}
	if len(items) == 0 { // every item is already in the conversation, as sent
		if _, err := s.loadConversation(c); err != nil {
			return err
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderList(&store.ItemPage{Items: []wire.Item{}}))
	}
	err = s.store.ConversationItemAppend(c.Request().Context(), &store.ConversationItemAppendParams{Tenant: tenant(c), ConversationID: id, Items: items})
	if errors.Is(err, store.ErrNotFound) {
		return wire.NotFound("conversation_id", "Conversation with id '%s' not found.", id)
	}
	if ce := (*store.ItemIDConflictError)(nil); errors.As(err, &ce) && ce.Index < len(items) {
		return appendConflict(ce, sent, items)
	}
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderList(&store.ItemPage{Items: readView(s.engine, c).Items(items)}))
}

func (s *conversations) getConversationItem(c echo.Context) error {
	id, itemID := c.Param("id"), c.Param("item_id")
	it, err := s.store.ConversationItemGet(c.Request().Context(), &store.ConversationItemGetParams{Tenant: tenant(c), ConversationID: id, ItemID: itemID})
	if errors.Is(err, store.ErrNotFound) {
		return wire.NotFound("item_id", "Item with id '%s' not found in conversation '%s'.", itemID, id)
	}
	if err != nil {
		return err
	}
	shown := readView(s.engine, c).Items([]wire.Item{it})[0]
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, wire.ValidUTF8(shown.JSON))
}

func (s *conversations) deleteConversationItem(c echo.Context) error {
	id, itemID := c.Param("id"), c.Param("item_id")
	ctx := c.Request().Context()
	err := s.store.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenant(c), ConversationID: id, ItemID: itemID})
	if errors.Is(err, store.ErrNotFound) {
		return wire.NotFound("item_id", "Item with id '%s' not found in conversation '%s'.", itemID, id)
	}
	if err != nil {
		return err
	}
	cv, err := s.loadConversation(c)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, renderConversation(cv))
}

// encryptedOnly reports a reasoning item whose only state is a non-empty encrypted_content.
func encryptedOnly(it wire.Item) bool {
	if it.Type != wire.TypeReasoning {
		return false
	}
	var r struct {
		Content          []struct{ Text string } `json:"content"`
		EncryptedContent *string                 `json:"encrypted_content"`
	}
	if json.Unmarshal(it.JSON, &r) != nil || r.EncryptedContent == nil || *r.EncryptedContent == "" {
		return false
	}
	for _, c := range r.Content {
		if c.Text != "" {
			return false
		}
	}
	return true
}
