package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/respgate/respgate/wire"
)

// ReplayRecord is one captured turn of the Chat Completions front door (docs/chat-completions.md):
// the complete output items of a chat turn under the visible identity the client's next request
// will show for it. Digests are hex strings the server computes (chatbridge); the store compares
// them only for equality.
type ReplayRecord struct {
	Tenant string
	Scope  string
	// End is the chain digest of the history including the assistant envelope the client sends
	// back: the record's key within a tenant and scope.
	End      string
	Start    string // the chain digest before that message
	Envelope string // the envelope's fingerprint
	Parent   string // End of the record replayed last when this one was produced ("" none)
	Payload  string // fingerprint of Items: a different payload for the same End is a conflict
	Items    []wire.Item
	// Blocked: never replay (a conflict, or a failed turn at Start); it keeps no items.
	Blocked   bool
	CreatedAt time.Time
	UsedAt    time.Time
}

// ReplayQueries are a backend's SQL for the replay records.
type ReplayQueries struct {
	List   string // (tenant, scope, Driver.Strings(ends)) → replayRows rows
	Insert string // (tenant, scope, end, start, envelope, parent, payload, items, bytes, now): upsert, blocking on another payload
	Block  string // (tenant, scope, start, now): block the records at start created up to now
	Touch  string // (tenant, scope, Driver.Strings(ends), now): used_at moves forward to now
	Bound  string // (tenant, scope, keep): delete all but the keep most recently used
	Purge  string // (before, limit): delete up to limit records unused since before, oldest first
}

type ReplayRecordListParams struct {
	Tenant string
	Scope  string
	Ends   []string
}

type ReplayRecordSaveParams struct {
	Tenant string
	Scope  string
	// Record, when set, is stored (Tenant and Scope are the params'). If a record with its End
	// exists with another Payload, both are a conflict: the row is blocked and keeps no items.
	Record *ReplayRecord
	// Block, when set, is a start digest: the records there created up to Now are blocked (a
	// failed or incomplete turn answered that history, so an older record is ambiguous there).
	Block string
	// Used are Ends whose use time moves forward to Now (records replayed by this request).
	Used []string
	Now  time.Time
	// MaxPerScope, when positive, keeps only that many records of the tenant's scope, the most
	// recently used.
	MaxPerScope int
}

type ReplayPurgeParams struct {
	Before time.Time
	Limit  int
}

// Statement is one SQL statement with its arguments, for a backend to run in its transaction.
type Statement struct {
	SQL  string
	Args []any
}

// ReplaySaveStatements are ReplayRecordSave's statements in order (block, insert, touch, bound),
// which each backend runs in one transaction its own way.
func ReplaySaveStatements(d Driver, q *ReplayQueries, p *ReplayRecordSaveParams) ([]Statement, error) {
	now := d.Time(NowOr(p.Now))
	var out []Statement
	if p.Block != "" {
		out = append(out, Statement{q.Block, []any{p.Tenant, p.Scope, p.Block, now}})
	}
	if r := p.Record; r != nil {
		items, n := itemsArray(r.Items)
		out = append(out, Statement{q.Insert, []any{p.Tenant, p.Scope, r.End, r.Start, r.Envelope, r.Parent, r.Payload, d.JSON(items), n, now}})
	}
	if len(p.Used) > 0 {
		ends, err := d.Strings(p.Used)
		if err != nil {
			return nil, err
		}
		out = append(out, Statement{q.Touch, []any{p.Tenant, p.Scope, ends, now}})
	}
	if p.MaxPerScope > 0 {
		out = append(out, Statement{q.Bound, []any{p.Tenant, p.Scope, p.MaxPerScope}})
	}
	return out, nil
}

// itemsArray is items as one JSON array, and the bytes of the items.
func itemsArray(items []wire.Item) (json.RawMessage, int) {
	b, n := []byte{'['}, 0
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it.JSON...)
		n += len(it.JSON)
	}
	return append(b, ']'), n
}

// replayRows reads (start, end, envelope, parent, payload, items, blocked, created_at, used_at).
func replayRows(tenant, scope string) func(Rows) ([]ReplayRecord, error) {
	return func(rows Rows) ([]ReplayRecord, error) {
		var out []ReplayRecord
		for rows.Next() {
			r := ReplayRecord{Tenant: tenant, Scope: scope}
			var items []byte
			var created, used nullTime
			if err := rows.Scan(&r.Start, &r.End, &r.Envelope, &r.Parent, &r.Payload, &items, &r.Blocked, &created, &used); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(items, &r.Items); err != nil {
				return nil, fmt.Errorf("decode replay items: %w", err)
			}
			r.CreatedAt, r.UsedAt = created.t, used.t
			out = append(out, r)
		}
		return out, rows.Err()
	}
}

// ReplayRecordList returns the tenant's records of the scope whose End is one of Ends, blocked
// ones included (they are markers), in one query.
func (b *Base) ReplayRecordList(ctx context.Context, p *ReplayRecordListParams) ([]ReplayRecord, error) {
	if len(p.Ends) == 0 {
		return nil, nil
	}
	ends, err := b.Driver.Strings(p.Ends)
	if err != nil {
		return nil, fmt.Errorf("list replay records: %w", err)
	}
	return query(ctx, b.Driver, "list replay records", replayRows(p.Tenant, p.Scope), b.Queries.Replay.List, p.Tenant, p.Scope, ends)
}

// ReplayPurge deletes up to Limit records of every tenant unused since Before, oldest first (the
// retention job's idle window), and returns how many.
func (b *Base) ReplayPurge(ctx context.Context, p *ReplayPurgeParams) (int, error) {
	return exec(ctx, b.Driver, "purge replay records", nil, b.Queries.Replay.Purge, b.Driver.Time(p.Before), p.Limit)
}
