// Package postgres is the Postgres store.Store backend (docs/design.md §3), on pgx and a pgxpool. Open runs
// the embedded migrations (migrations/postgres) with golang-migrate under an advisory lock, so
// several replicas may start at once. Every query filters on the tenant and uses placeholders only.
//
// Item JSON, the request echo, usage, error, incomplete_details and conversation metadata are
// stored in `json` columns, which keep the exact text (see migrations/postgres/001): reads return
// the bytes that were written. Such text must therefore be valid UTF-8.
//
// It must not leak pgx types through the store interface.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/jobq"
	"github.com/respgate/respgate/wire"
)

// Store is the Postgres store.Store. Safe for concurrent use.
type Store struct {
	store.Base
	pool *pgxpool.Pool
	jobs *jobq.Client[pgx.Tx] // River, in this database (background.go)
	// watch is the LISTEN connection of event notifications and its watchers (notify.go);
	// channel is the store's notification channel.
	watch   *watcher
	channel string
	// tracer counts the connections' statements and times pool acquires (metrics.go).
	tracer *tracer
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.Jobs         = (*Store)(nil)
	_ store.EventWatcher = (*Store)(nil)
)

// Option configures Open.
type Option func(*options)

type options struct {
	schema     string
	maxConns   int32
	roundTrips *atomic.Int64
	log        *slog.Logger
}

// WithSchema puts the tables in schema (which must exist) by making it the connections'
// search_path. The DSN's own search_path runtime parameter does the same; tests use one or the
// other to isolate each test in its own schema.
func WithSchema(schema string) Option { return func(o *options) { o.schema = schema } }

// WithRoundTrips counts in n the round trips the store's queries take: each query, each
// pipelined batch, each BEGIN and COMMIT (benchmarks report it per operation; statement
// preparation, once per connection and statement, is not counted).
func WithRoundTrips(n *atomic.Int64) Option { return func(o *options) { o.roundTrips = n } }

// WithLogger sets where the store logs what no caller sees: today the event listener's lost
// connections (notify.go). Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMaxConns caps the pool size (pgxpool's default: the larger of 4 and the number of CPUs).
func WithMaxConns(n int32) Option { return func(o *options) { o.maxConns = n } }

// Open connects to the database at dsn (a postgres:// URL or key=value string as pgx accepts),
// applies pending migrations and returns a ready Store. The caller must Close it.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	o := options{log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse postgres dsn: %w", err)
	}
	if o.schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{o.schema}.Sanitize()
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	tr := newTracer(o.roundTrips)
	cfg.ConnConfig.Tracer = tr
	if err := migrate(cfg.ConnConfig); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("read schema: %w", err)
	}
	jobs, err := openJobs(ctx, pool, schema)
	if err != nil {
		pool.Close()
		return nil, err
	}
	channel := channelFor(schema)
	return &Store{Base: store.Base{Driver: driver{pool}, Queries: &queries}, pool: pool, jobs: jobs,
		watch: newWatcher(pool.Config().ConnConfig, channel, o.log), channel: channel, tracer: tr}, nil
}

// migrate applies the embedded migrations over a dedicated database/sql connection, which is
// what golang-migrate's pgx driver takes; it is closed afterwards.
func migrate(cc *pgx.ConnConfig) error {
	drv, err := migrationDriver(cc)
	if err != nil {
		return err
	}
	return migrations.Up(migrations.Postgres, migrations.PostgresDir, drv)
}

// migrationDriver opens golang-migrate's driver on a connection of its own (closed with it).
func migrationDriver(cc *pgx.ConnConfig) (database.Driver, error) {
	db := stdlib.OpenDB(*cc.Copy())
	drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("start postgres migrations: %w", err)
	}
	return drv, nil
}

// MigrationDriver is golang-migrate's driver on the database at dsn, for `respgate admin
// migrate` (migrations.Status, Up, Down close it). Unlike Open it applies nothing.
func MigrationDriver(dsn string) (database.Driver, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse postgres dsn: %w", err)
	}
	return migrationDriver(cfg)
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	// A River client still working would use the pool after it closes: stop it first (a no-op
	// when the background package already did).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.jobs.Stop(ctx)
	s.watch.stop()
	s.pool.Close()
	return nil
}

// interpretError maps driver errors to the store's sentinels: no rows is ErrNotFound, a unique
// violation ErrConflict. Anything else passes through unchanged.
func interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("%w (%s)", store.ErrConflict, pgErr.ConstraintName)
	}
	return err
}

// driver adapts the pool to store.Driver.
type driver struct{ pool *pgxpool.Pool }

func (d driver) Ping(ctx context.Context) error {
	if err := d.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

func (d driver) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	return d.pool.Query(ctx, sql, args...)
}

func (d driver) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	return d.pool.QueryRow(ctx, sql, args...)
}

func (d driver) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := d.pool.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (driver) InterpretError(err error) error { return interpretError(err) }

// Time is t in UTC, for a timestamptz column.
func (driver) Time(t time.Time) any { return t.UTC() }

// JSON is raw's exact bytes for a json column, or NULL.
func (driver) JSON(raw json.RawMessage) any {
	if b := store.NullJSON(raw); b != nil {
		return []byte(b)
	}
	return nil
}

// Strings is s as a text[].
func (driver) Strings(s []string) (any, error) { return s, nil }

// itemArrays spreads items over the parallel arrays insertItemsSQL unnests. roles and positions
// are empty strings and -1 for items created directly in a conversation.
type itemArrays struct {
	roles     []string
	positions []int32
	ids       []string
	types     []string
	data      []string
}

func (a *itemArrays) add(role string, items []wire.Item) {
	for i, it := range items {
		pos := int32(i)
		if role == "" {
			pos = -1
		}
		a.roles = append(a.roles, role)
		a.positions = append(a.positions, pos)
		a.ids = append(a.ids, it.ID)
		a.types = append(a.types, it.Type)
		a.data = append(a.data, string(it.JSON))
	}
}

func (a *itemArrays) len() int { return len(a.ids) }

func queueInsertItems(b *pgx.Batch, tenant string, responseID, conversationID any, a *itemArrays) {
	b.Queue(insertItemsSQL, tenant, responseID, a.roles, a.positions, a.ids, a.types, a.data, conversationID)
}

// eventArrays spreads events over the parallel arrays insertEventsSQL unnests.
func eventArrays(events []store.Event) (seqs []int64, types []string, data [][]byte) {
	n := len(events)
	return appendEventArrays(make([]int64, 0, n), make([]string, 0, n), make([][]byte, 0, n), events)
}

// appendEventArrays appends events to the parallel arrays of eventArrays.
func appendEventArrays(seqs []int64, types []string, data [][]byte, events []store.Event) ([]int64, []string, [][]byte) {
	for _, e := range events {
		d := e.Data
		if d == nil {
			d = []byte{} // NOT NULL: an empty event is empty bytes
		}
		seqs, types, data = append(seqs, e.Seq), append(types, string(e.Type)), append(data, d)
	}
	return seqs, types, data
}
