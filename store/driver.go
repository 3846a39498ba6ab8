package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/respgate/respgate/wire"
)

// Driver is what a backend adapts its database handle to so that Base can run the logic every
// backend shares (River's driver shape, docs/style.md "Store contract and conformance"): plain
// queries, one interpretError, and how the backend encodes a query argument. It never carries a
// transaction: a method that must be atomic stays in its backend.
type Driver interface {
	// Ping checks that the database answers; its error names the backend.
	Ping(ctx context.Context) error
	// Query runs a query; the caller closes the rows.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// QueryRow runs a query for at most one row; no row is the driver's no-rows error on Scan.
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// InterpretError maps the driver's errors to ErrNotFound and ErrConflict; anything else
	// passes through unchanged.
	InterpretError(err error) error
	// Time encodes a time as the backend stores it.
	Time(t time.Time) any
	// JSON encodes JSON as the backend stores it; nil (SQL NULL) when raw is empty or null.
	JSON(raw json.RawMessage) any
	// Strings encodes a list of strings as one query argument.
	Strings(s []string) (any, error)
}

// Row is one row of a driver's result: pgx.Row and *sql.Row have it.
type Row interface {
	Scan(dest ...any) error
}

// Rows is a driver's result set as the shared row loops read it: pgx.Rows has it as it is; a
// database/sql backend adapts *sql.Rows (whose Close returns an error).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// query runs sql on d and hands its rows to collect. Errors are interpreted and prefixed with
// what.
func query[T any](ctx context.Context, d Driver, what string, collect func(Rows) (T, error), sql string, args ...any) (T, error) {
	var zero T
	rows, err := d.Query(ctx, sql, args...)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, d.InterpretError(err))
	}
	defer rows.Close()
	v, err := collect(rows)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, d.InterpretError(err))
	}
	return v, nil
}

// exec runs a statement on d; none is the error when it changes no row (nil: no error).
func exec(ctx context.Context, d Driver, what string, none error, sql string, args ...any) (int, error) {
	n, err := d.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, d.InterpretError(err))
	}
	if n == 0 && none != nil {
		return 0, fmt.Errorf("%s: %w", what, none)
	}
	return int(n), nil
}

// ResponseArgs are a response record's columns as query arguments, in the order both backends'
// inserts take them: tenant, id, status, model, previous_response_id, conversation_id,
// created_at (zero: now), completed_at, echo, usage, error, incomplete_details. The replica
// columns (migrations 008, 010) are not among them: every statement writing them takes
// ReplicaArgs last, after whatever each backend appends (lease, lineage).
func ResponseArgs(d Driver, r *Response, status wire.Status) []any {
	var completed any
	if r.CompletedAt != nil {
		completed = d.Time(*r.CompletedAt)
	}
	return []any{r.Tenant, r.ID, status, r.Model, NullString(r.PreviousResponseID), NullString(r.ConversationID),
		d.Time(NowOr(r.CreatedAt)), completed, d.JSON(r.Echo), d.JSON(r.Usage), d.JSON(r.Error), d.JSON(r.IncompleteDetails)}
}

// ReplicaArgs are the replica columns' arguments (migrations 008 and 010): replica, NULL when
// the response names no replica, then replica_away.
func ReplicaArgs(r *Response) []any { return []any{NullString(r.Replica), r.ReplicaAway} }

// BeginArgs are ResponseBegin's arguments: ResponseArgs with the status beginStatus allows, then
// lease_owner, lease_expires_at and ReplicaArgs.
func BeginArgs(d Driver, p *ResponseBeginParams) ([]any, error) {
	status, err := beginStatus(p.Response.Status)
	if err != nil {
		return nil, fmt.Errorf("begin response: %w", err)
	}
	return append(append(ResponseArgs(d, &p.Response, status), p.LeaseOwner, d.Time(p.LeaseExpiresAt)), ReplicaArgs(&p.Response)...), nil
}

// FinishArgs are ResponseArgs without created_at, then ReplicaArgs: the columns a commit updates
// on the record ResponseBegin wrote.
func FinishArgs(d Driver, r *Response) []any {
	a := ResponseArgs(d, r, r.Status)
	return append(append(a[:6:6], a[7:]...), ReplicaArgs(r)...)
}

// NullString is s, or nil (SQL NULL) when empty.
func NullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// NullJSON is raw, or nil when it is empty or the JSON literal null (stored as SQL NULL).
func NullJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// ObjectJSON is raw, or {} when empty or null: conversation metadata is never null.
func ObjectJSON(raw json.RawMessage) json.RawMessage {
	if b := NullJSON(raw); b != nil {
		return b
	}
	return json.RawMessage(`{}`)
}

// NowOr is t, or the current time when t is zero, in UTC.
func NowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now().UTC()
	}
	return t.UTC()
}

// nullTime scans a nullable time column of either backend: a timestamp (Postgres) or integer
// Unix microseconds (SQLite: migrations/sqlite/001_initial.up.sql).
type nullTime struct {
	t     time.Time
	valid bool
}

func (n *nullTime) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*n = nullTime{}
	case time.Time:
		n.t, n.valid = v.UTC(), true
	case int64:
		n.t, n.valid = time.UnixMicro(v).UTC(), true
	default:
		return fmt.Errorf("scan time: unexpected %T", v)
	}
	return nil
}

func (n *nullTime) ptr() *time.Time {
	if !n.valid {
		return nil
	}
	t := n.t
	return &t
}
