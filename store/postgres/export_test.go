package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/store"
)

// Hooks for the package's external tests (notify_test.go).

// ChannelFor is channelFor.
var ChannelFor = channelFor

// Channel is the store's notification channel.
func (s *Store) Channel() string { return s.watch.channel }

// Notify sends a notification of id on the store's channel, as a notifying write does.
func (s *Store) Notify(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, notifySQL, s.watch.channel, id)
	return err
}

// ListenerRunning reports whether the store's listener goroutine is running.
func (s *Store) ListenerRunning() bool {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.cancel != nil || s.watch.done != nil
}

// Exec runs sql on the store's pool.
func (s *Store) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := s.pool.Exec(ctx, sql, args...)
	return err
}

// ListenerGoroutines is the number of listener goroutines that have not returned.
func (s *Store) ListenerGoroutines() int { return int(s.watch.running.Load()) }

// SynchronousCommitAfterAppend runs the event-log append statement for response id (with no
// events) in a transaction whose synchronous_commit starts on, and returns the setting that
// transaction then commits with.
func (s *Store) SynchronousCommitAfterAppend(ctx context.Context, tenant, id string) (string, error) {
	return s.synchronousCommitAfter(ctx, func(tx pgx.Tx) error {
		var found []int64
		return tx.QueryRow(ctx, appendEventsSQL, []string{tenant}, []string{id}, []int64{}, []int64{}, []string{}, [][]byte{}).Scan(&found)
	})
}

// SynchronousCommitAfterBegin is SynchronousCommitAfterAppend for ResponseBegin's batch for p,
// run statement by statement.
func (s *Store) SynchronousCommitAfterBegin(ctx context.Context, p *store.ResponseBeginParams) (string, error) {
	b, err := s.beginBatch(p)
	if err != nil {
		return "", err
	}
	return s.synchronousCommitAfter(ctx, func(tx pgx.Tx) error {
		for _, q := range b.QueuedQueries {
			if _, err := tx.Exec(ctx, q.SQL, q.Arguments...); err != nil {
				return err
			}
		}
		return nil
	})
}

// synchronousCommitAfter runs run in a transaction whose synchronous_commit starts on, and
// returns the setting that transaction then commits with.
func (s *Store) synchronousCommitAfter(ctx context.Context, run func(pgx.Tx) error) (string, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
		return "", err
	}
	if err := run(tx); err != nil {
		return "", err
	}
	var v string
	err = tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v)
	return v, err
}

// The statements of a turn that read responses and items, for the plan test.
var (
	ResponseBeginSQL = responseBeginSQL
	FinishSQL        = mustWrite("WITH", finishResponseSQL, noResponseWritten)
	UpsertSQL        = mustWrite(lineageCTE+",", upsertResponseInsertSQL, noResponseWritten)
	InsertItemsSQL   = insertItemsSQL
	ResponseChainSQL = queries.ResponseChain
	AppendEventsSQL  = appendEventsSQL
)

// GenericPlan is the text of the generic plan Postgres makes for sql, as a pooled connection's
// cached statement is planned after its first executions: EXPLAIN EXECUTE of sql prepared on one
// connection with plan_cache_mode=force_generic_plan, args being the EXECUTE's literal arguments.
func (s *Store) GenericPlan(ctx context.Context, sql, args string) (string, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer c.Release()
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `PREPARE plan_probe AS ` + sql} {
		if _, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			return "", err
		}
	}
	defer func() {
		_, _ = c.Exec(context.WithoutCancel(ctx), `DEALLOCATE plan_probe; RESET plan_cache_mode`, pgx.QueryExecModeSimpleProtocol)
	}()
	rows, err := c.Query(ctx, `EXPLAIN EXECUTE plan_probe(`+args+`)`, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var plan []byte
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		plan = append(append(plan, line...), '\n')
	}
	return string(plan), rows.Err()
}
