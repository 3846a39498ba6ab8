package store

import (
	"context"
	"errors"
	"fmt"
)

// ResponseKey names one stored response.
type ResponseKey struct{ Tenant, ID string }

// DeleteResponses deletes each response with del (a backend's ResponseDelete), after the backend's
// ResponsePurge has chosen them. A response deleted meanwhile (ErrNotFound: another replica purged
// it, or its owner deleted it) is skipped. It returns how many it deleted.
func DeleteResponses(ctx context.Context, keys []ResponseKey, del func(context.Context, *ResponseDeleteParams) error) (int, error) {
	n := 0
	for _, k := range keys {
		err := del(ctx, &ResponseDeleteParams{Tenant: k.Tenant, ID: k.ID})
		switch {
		case err == nil:
			n++
		case !errors.Is(err, ErrNotFound):
			return n, fmt.Errorf("purge responses: %w", err)
		}
	}
	return n, nil
}
