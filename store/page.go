package store

import (
	"fmt"

	"github.com/respgate/respgate/wire"
)

// Default and maximum page sizes of the list methods (the OpenAI list endpoints' limits).
const (
	DefaultPageLimit = 20
	MaxPageLimit     = 100
)

// PageLimit normalises a requested page size for a backend: 0 or less is the default, more than
// the maximum is the maximum.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultPageLimit
	case n > MaxPageLimit:
		return MaxPageLimit
	}
	return n
}

// Descending validates a list order for a backend; empty means ascending.
func (o Order) Descending() (bool, error) {
	switch o {
	case OrderAsc, "":
		return false, nil
	case OrderDesc:
		return true, nil
	}
	return false, fmt.Errorf("list items: unknown order %q", o)
}

// PageOf trims a backend's limit+1 query result to a page: the extra row only says there is more.
func PageOf(items []wire.Item, limit int) *ItemPage {
	p := &ItemPage{Items: items}
	if len(items) > limit {
		p.Items, p.HasMore = items[:limit], true
	}
	return p
}
