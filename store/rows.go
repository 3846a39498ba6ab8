package store

import (
	"github.com/respgate/respgate/wire"
)

// The row shapes below are the contract between the shared logic and each backend's SQL
// (store/sql.go, store/postgres/queries.go, store/sqlite/queries.go): a query names the shape it
// returns.

// scanItem reads one item row: (id, type, data).
func scanItem(row Row) (wire.Item, error) {
	var it wire.Item
	var data []byte
	if err := row.Scan(&it.ID, &it.Type, &data); err != nil {
		return wire.Item{}, err
	}
	it.JSON = data
	return it, nil
}

// scanItemRows reads item rows, (id, type, data), in order.
func scanItemRows(rows Rows) ([]wire.Item, error) {
	var out []wire.Item
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// itemsByID reads item rows into a map by id (a later row wins).
func itemsByID(rows Rows) (map[string]wire.Item, error) {
	items, err := scanItemRows(rows)
	if err != nil {
		return nil, err
	}
	out := make(map[string]wire.Item, len(items))
	for _, it := range items {
		out[it.ID] = it
	}
	return out, nil
}

// collectMarked reads a result whose first row, a marker, only proves that the object listed
// exists, so an empty list is told from an unknown object (ErrNotFound) in one query. scan reads
// one row and says whether it is the marker.
func collectMarked[T any](rows Rows, scan func(Rows) (T, bool, error)) ([]T, error) {
	found := false
	out := []T{}
	for rows.Next() {
		v, marker, err := scan(rows)
		if err != nil {
			return nil, err
		}
		if marker {
			found = true
			continue
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNotFound
	}
	return out, nil
}

// contextItems reads ResponseContextGet's rows: (part, depth, role, ord, id, type, data), part 0
// the marker.
func contextItems(rows Rows) ([]wire.Item, error) {
	return collectMarked(rows, func(r Rows) (wire.Item, bool, error) {
		var part, depth, role int
		var ord int64
		var it wire.Item
		var data []byte
		if err := r.Scan(&part, &depth, &role, &ord, &it.ID, &it.Type, &data); err != nil {
			return it, false, err
		}
		it.JSON = data
		return it, part == 0, nil
	})
}

// seqItems reads ConversationItemsAll's rows: (seq, id, type, data), seq -1 the marker.
func seqItems(rows Rows) ([]wire.Item, error) {
	return collectMarked(rows, func(r Rows) (wire.Item, bool, error) {
		var seq int64
		var it wire.Item
		var data []byte
		if err := r.Scan(&seq, &it.ID, &it.Type, &data); err != nil {
			return it, false, err
		}
		it.JSON = data
		return it, seq < 0, nil
	})
}

// eventRows reads ResponseEventList's rows: (kind, seq, type, data), kind 0 the marker. An empty
// event is empty bytes, never nil.
func eventRows(rows Rows) ([]Event, error) {
	return collectMarked(rows, func(r Rows) (Event, bool, error) {
		var kind int
		var e Event
		if err := r.Scan(&kind, &e.Seq, &e.Type, &e.Data); err != nil {
			return e, false, err
		}
		if e.Data == nil {
			e.Data = []byte{}
		}
		return e, kind == 0, nil
	})
}

// scanConversation reads a conversation row: (id, tenant, metadata, created_at).
func scanConversation(row Row) (*Conversation, error) {
	var c Conversation
	var meta []byte
	var created nullTime
	if err := row.Scan(&c.ID, &c.Tenant, &meta, &created); err != nil {
		return nil, err
	}
	c.Metadata = ObjectJSON(meta)
	c.CreatedAt = created.t
	return &c, nil
}
