package store

import (
	"context"
	"fmt"
	"time"
)

// Admin is the operator's view of a store (`respgate admin`): lookups and counts across tenants
// that the gateway itself never makes. Both backends have it through Base; storetest checks it.
// Nothing here returns content: callers read items through the Store methods, tenant-scoped.
type Admin interface {
	// ResponseLocate finds which tenant holds the response ID and the state of its lease.
	// ErrNotFound if no tenant has it.
	ResponseLocate(ctx context.Context, p *ResponseLocateParams) (*ResponseLocation, error)
	// ResponseIDList pages through a tenant's response ids in id order, after After ("" from the
	// first), at most Limit.
	ResponseIDList(ctx context.Context, p *ResponseIDListParams) ([]string, error)
	// ResponsePurgeCount counts what ResponsePurge would delete with the same Before: terminal
	// responses of every tenant created before it (purge --dry-run).
	ResponsePurgeCount(ctx context.Context, p *ResponsePurgeCountParams) (int, error)
}

type ResponseLocateParams struct {
	ID string
}

// ResponseLocation is where a response lives and who holds it.
type ResponseLocation struct {
	Tenant         string
	LeaseOwner     string     // "" when no lease is held
	LeaseExpiresAt *time.Time // nil when no lease is held
}

type ResponseIDListParams struct {
	Tenant string
	After  string
	Limit  int // > 0
}

type ResponsePurgeCountParams struct {
	Before time.Time
}

var _ Admin = (*Base)(nil)

const (
	// Response ids are minted at random (resp_ and 24+ random characters), so one id names one
	// response; LIMIT 2 still lets a duplicate across tenants be reported rather than guessed.
	responseLocateSQL = `SELECT tenant, coalesce(lease_owner, ''), lease_expires_at FROM responses WHERE id = $1 ORDER BY tenant LIMIT 2`
	responseIDListSQL = `SELECT id FROM responses WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`
	// The same rows ResponsePurge deletes (store/postgres and store/sqlite purgeSQL).
	responsePurgeCountSQL = `SELECT count(*) FROM responses WHERE status IN ('completed', 'incomplete', 'failed', 'cancelled') AND created_at < $1`
)

// ResponseLocate implements Admin.
func (b *Base) ResponseLocate(ctx context.Context, p *ResponseLocateParams) (*ResponseLocation, error) {
	rows, err := b.Driver.Query(ctx, responseLocateSQL, p.ID)
	if err != nil {
		return nil, fmt.Errorf("locate response: %w", b.Driver.InterpretError(err))
	}
	defer rows.Close()
	var out []ResponseLocation
	for rows.Next() {
		var l ResponseLocation
		var exp nullTime
		if err := rows.Scan(&l.Tenant, &l.LeaseOwner, &exp); err != nil {
			return nil, fmt.Errorf("locate response: %w", err)
		}
		l.LeaseExpiresAt = exp.ptr()
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("locate response: %w", b.Driver.InterpretError(err))
	}
	switch len(out) {
	case 0:
		return nil, ErrNotFound
	case 1:
		return &out[0], nil
	}
	return nil, fmt.Errorf("locate response: %d tenants hold this id: %w", len(out), ErrConflict)
}

// ResponseIDList implements Admin.
func (b *Base) ResponseIDList(ctx context.Context, p *ResponseIDListParams) ([]string, error) {
	rows, err := b.Driver.Query(ctx, responseIDListSQL, p.Tenant, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list response ids: %w", b.Driver.InterpretError(err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list response ids: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list response ids: %w", b.Driver.InterpretError(err))
	}
	return ids, nil
}

// ResponsePurgeCount implements Admin.
func (b *Base) ResponsePurgeCount(ctx context.Context, p *ResponsePurgeCountParams) (int, error) {
	var n int
	if err := b.Driver.QueryRow(ctx, responsePurgeCountSQL, b.Driver.Time(p.Before)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count purgeable responses: %w", b.Driver.InterpretError(err))
	}
	return n, nil
}
