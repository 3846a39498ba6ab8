package store

import (
	"context"
	"fmt"

	"github.com/respgate/respgate/wire"
)

// Default and maximum page sizes of the list methods (the OpenAI list endpoints' limits).
const (
	DefaultPageLimit = 20
	MaxPageLimit     = 100
)

// PageLimit normalises a requested page size: 0 or less is the default, more than the maximum
// is the maximum.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultPageLimit
	case n > MaxPageLimit:
		return MaxPageLimit
	}
	return n
}

// Descending validates a list order; empty means ascending.
func (o Order) Descending() (bool, error) {
	switch o {
	case OrderAsc, "":
		return false, nil
	case OrderDesc:
		return true, nil
	}
	return false, fmt.Errorf("list items: unknown order %q", o)
}

// PageOf trims a limit+1 query result to a page: the extra row only says there is more.
func PageOf(items []wire.Item, limit int) *ItemPage {
	p := &ItemPage{Items: items}
	if len(items) > limit {
		p.Items, p.HasMore = items[:limit], true
	}
	return p
}

// PageSQL are the queries of one paginated list. Asc and Desc return item rows (id, type, data)
// after the cursor in their order, taking the list's arguments then the row limit; Check, run
// only when a page is empty, returns (list exists, cursor is empty or in the list) from the
// list's arguments, so an empty list is told from an unknown list or cursor.
type PageSQL struct {
	Asc, Desc, Check string
}

// listPage runs one page of a list: order and limit handling, has_more, and the unknown list or
// cursor check. args are the list's arguments, the cursor among them.
func listPage(ctx context.Context, d Driver, what string, q *PageSQL, order Order, limit int, args ...any) (*ItemPage, error) {
	desc, err := order.Descending()
	if err != nil {
		return nil, err
	}
	limit = PageLimit(limit)
	sql := q.Asc
	if desc {
		sql = q.Desc
	}
	items, err := query(ctx, d, what, scanItemRows, sql, append(args, limit+1)...)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		var found, cursor bool
		if err := d.QueryRow(ctx, q.Check, args...).Scan(&found, &cursor); err != nil {
			return nil, fmt.Errorf("%s: %w", what, d.InterpretError(err))
		}
		if !found || !cursor {
			return nil, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
	}
	return PageOf(items, limit), nil
}
