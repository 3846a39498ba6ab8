package sqlite

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/jobq"
	"github.com/respgate/respgate/wire"
)

// Background turns on River (docs/background.md): the store owns the River client
// (store/jobq, River's SQLite driver) on its own connection, so the queued response and its job
// are one transaction. River's notifier on SQLite is a notification table (riversqlite),
// and a cancel is delivered in process (docs/background.md, "SQLite").

// openJobs runs River's migrations and builds the insert-only River client.
func (s *Store) openJobs(ctx context.Context) error {
	drv := riversqlite.New(s.db)
	// One connection: River's migrations run one after another on it, nothing else can interleave.
	err := jobq.Migrate(ctx, drv, "")
	if err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	s.jobs, err = jobq.New(drv, "")
	return err
}

// JobsStart starts working jobs (store.Jobs).
func (s *Store) JobsStart(ctx context.Context, cfg *river.Config) error {
	return s.jobs.Start(ctx, cfg)
}

// JobsStop stops working jobs (store.Jobs).
func (s *Store) JobsStop(ctx context.Context) error { return s.jobs.Stop(ctx) }

// ResponseEnqueueBackground stores a queued background response with its River job in one
// transaction; see store.Store.
func (s *Store) ResponseEnqueueBackground(ctx context.Context, p *store.ResponseEnqueueBackgroundParams) error {
	r := &p.Response
	err := s.inTx(ctx, func(tx *txn) error {
		return store.EnqueueBackgroundTx(s.backgroundTx(ctx, tx), s.Driver, p, func() error {
			l, err := lineage(ctx, tx, r.Tenant, r.PreviousResponseID)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, responseInsertSQL, append(append(store.ResponseArgs(s.Driver, r, wire.StatusQueued), l...), store.ReplicaArgs(r)...)...); err != nil {
				return interpretError(err)
			}
			return insertItems(ctx, tx, r.Tenant, r.ID, store.RoleInput, p.Input, "", nil)
		})
	})
	if err != nil {
		return fmt.Errorf("enqueue background response: %w", interpretError(err))
	}
	return nil
}

// backgroundTx is tx as the shared background transactions run it (store.BackgroundTx); Exec's
// errors are interpreted.
func (s *Store) backgroundTx(ctx context.Context, tx *txn) store.BackgroundTx {
	return s.jobs.BackgroundTx(ctx, tx.Tx,
		func(q string, args ...any) store.Row { return tx.QueryRowContext(ctx, q, args...) },
		func(q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return interpretError(err)
		})
}

// ResponseCancelBackground cancels a background response's job; see store.Store.
func (s *Store) ResponseCancelBackground(ctx context.Context, p *store.ResponseCancelBackgroundParams) (store.CancelOutcome, error) {
	var out store.CancelOutcome
	var jobID int64
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		out, jobID, err = store.CancelBackgroundTx(s.backgroundTx(ctx, tx), &queries, p)
		return err
	})
	return store.CancelBackgroundResult(ctx, out, jobID, interpretError(err), s.jobs.Notify)
}

// bgQueuedCountSQL (tenant, response, job) counts a queued response still on that job (0:
// claimed, ended or requeued meanwhile); SQLite's one writer serialises it with a claim
// (store.RequeueBackground).
const bgQueuedCountSQL = `
SELECT count(*) FROM responses r JOIN background_turns b ON b.tenant = r.tenant AND b.response_id = r.id
WHERE r.tenant = ?1 AND r.id = ?2 AND r.status = 'queued' AND b.job_id = ?3`

// ResponseBackgroundRequeue re-runs the queued responses whose worker died between River's fetch
// and the claim; see store.Jobs.
func (s *Store) ResponseBackgroundRequeue(ctx context.Context, p *store.ResponseBackgroundRequeueParams) (int, error) {
	return store.RequeueBackground(ctx, s.Driver, p, bgQueuedCountSQL, s.jobs.Stranded,
		func(ctx context.Context, f func(store.BackgroundTx) error) error {
			return s.inTx(ctx, func(tx *txn) error { return f(s.backgroundTx(ctx, tx)) })
		})
}
