package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/jobq"
	"github.com/respgate/respgate/wire"
)

// Background turns on River (docs/background.md): the store owns the River client (store/jobq)
// on its own pool, so the queued response and its job are one transaction.

// riverLockKey is the advisory lock respgate's migrate step holds while River's migrations run,
// so replicas starting at once do not race (golang-migrate's own lock covers only its files).
const riverLockKey = 0x72657370_72697672 // "resp" "rivr"

// openJobs runs River's migrations (in the store's schema, under an advisory lock) and builds
// the insert-only River client.
func openJobs(ctx context.Context, pool *pgxpool.Pool, schema string) (*jobq.Client[pgx.Tx], error) {
	drv := riverpgxv5.New(pool)
	// River's migrations commit one by one (a later one uses an enum value an earlier one adds),
	// so the lock is a session lock on a connection of its own, held around them.
	// (Not a pool connection: a pool of one would deadlock.)
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(riverLockKey)); err != nil {
		return nil, fmt.Errorf("migrate river: lock: %w", err)
	}
	err = jobq.Migrate(ctx, drv, schema)
	if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(riverLockKey)); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	// River's schema qualifies its tables and its notification topics, so stores in different
	// schemas of one database (tests) never see each other's jobs.
	return jobq.New(drv, schema)
}

// JobsStart starts working jobs (store.Jobs).
func (s *Store) JobsStart(ctx context.Context, cfg *river.Config) error {
	return s.jobs.Start(ctx, cfg)
}

// JobsStop stops working jobs (store.Jobs).
func (s *Store) JobsStop(ctx context.Context) error { return s.jobs.Stop(ctx) }

const (
	// bgResponseInsertSQL inserts the queued record with its lineage, as any new response
	// (lineageCTE, migrations/postgres/006), and the replica $13 and replica_away $14.
	bgResponseInsertSQL = lineageCTE + `
INSERT INTO responses (tenant, id, status, model, previous_response_id, conversation_id, created_at,
                       completed_at, echo, usage, error, incomplete_details, replica, replica_away,
                       branch, depth, fork_branch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, ` + lineageValues + `)`
)

// ResponseEnqueueBackground stores a queued background response with its River job in one
// transaction; see store.Store.
func (s *Store) ResponseEnqueueBackground(ctx context.Context, p *store.ResponseEnqueueBackgroundParams) error {
	r := &p.Response
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return store.EnqueueBackgroundTx(s.backgroundTx(ctx, tx), s.Driver, p, func() error {
			if _, err := tx.Exec(ctx, bgResponseInsertSQL, append(store.ResponseArgs(s.Driver, r, wire.StatusQueued), store.ReplicaArgs(r)...)...); err != nil {
				return interpretError(err)
			}
			if len(p.Input) > 0 {
				var items itemArrays
				items.add(store.RoleInput, p.Input)
				if _, err := tx.Exec(ctx, insertItemsSQL, r.Tenant, r.ID, items.roles, items.positions, items.ids, items.types, items.data, nil); err != nil {
					return interpretError(err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("enqueue background response: %w", err)
	}
	return nil
}

// backgroundTx is tx as the shared background transactions run it (store.BackgroundTx); Exec's
// errors are interpreted.
func (s *Store) backgroundTx(ctx context.Context, tx pgx.Tx) store.BackgroundTx {
	return s.jobs.BackgroundTx(ctx, tx,
		func(q string, args ...any) store.Row { return tx.QueryRow(ctx, q, args...) },
		func(q string, args ...any) error {
			_, err := tx.Exec(ctx, q, args...)
			return interpretError(err)
		})
}

// ResponseCancelBackground cancels a background response's job; see store.Store.
func (s *Store) ResponseCancelBackground(ctx context.Context, p *store.ResponseCancelBackgroundParams) (store.CancelOutcome, error) {
	var out store.CancelOutcome
	var jobID int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, jobID, err = store.CancelBackgroundTx(s.backgroundTx(ctx, tx), &queries, p)
		if err != nil || out != store.CancelQueued {
			return err
		}
		// Its followers on other replicas see the end at once (notify.go).
		_, err = tx.Exec(ctx, notifySQL, s.channel, p.ID)
		return err
	})
	return store.CancelBackgroundResult(ctx, out, jobID, interpretError(err), s.jobs.Notify)
}

// bgQueuedLockSQL (tenant, response, job) locks a queued response and its turn row and counts
// them (0: claimed, ended, or requeued by another replica meanwhile), so a claim waits for a
// requeue and two replicas' requeues of one job are serialised (store.RequeueBackground).
const bgQueuedLockSQL = `
SELECT count(*) FROM (SELECT 1 FROM responses r JOIN background_turns b ON b.tenant = r.tenant AND b.response_id = r.id
WHERE r.tenant = $1 AND r.id = $2 AND r.status = 'queued' AND b.job_id = $3 FOR UPDATE) q`

// ResponseBackgroundRequeue re-runs the queued responses whose worker died between River's fetch
// and the claim; see store.Jobs.
func (s *Store) ResponseBackgroundRequeue(ctx context.Context, p *store.ResponseBackgroundRequeueParams) (int, error) {
	return store.RequeueBackground(ctx, s.Driver, p, bgQueuedLockSQL, s.jobs.Stranded,
		func(ctx context.Context, f func(store.BackgroundTx) error) error {
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return f(s.backgroundTx(ctx, tx)) })
		})
}
