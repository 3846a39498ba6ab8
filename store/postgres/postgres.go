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
	"time"

	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// maxChainDepth bounds ResponseChainGet's recursion so that a corrupt, cyclic chain cannot run
// forever; no real conversation comes near it.
const maxChainDepth = 100_000

// Store is the Postgres store.Store. Safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*options)

type options struct {
	schema   string
	maxConns int32
}

// WithSchema puts the tables in schema (which must exist) by making it the connections'
// search_path. The DSN's own search_path runtime parameter does the same; tests use one or the
// other to isolate each test in its own schema.
func WithSchema(schema string) Option { return func(o *options) { o.schema = schema } }

// WithMaxConns caps the pool size (pgxpool's default: the larger of 4 and the number of CPUs).
func WithMaxConns(n int32) Option { return func(o *options) { o.maxConns = n } }

// Open connects to the database at dsn (a postgres:// URL or key=value string as pgx accepts),
// applies pending migrations and returns a ready Store. The caller must Close it.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
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
	return &Store{pool: pool}, nil
}

// migrate applies the embedded migrations over a dedicated database/sql connection, which is
// what golang-migrate's pgx driver takes; it is closed afterwards.
func migrate(cc *pgx.ConnConfig) error {
	db := stdlib.OpenDB(*cc.Copy())
	drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{})
	if err != nil {
		_ = db.Close()
		return fmt.Errorf("start postgres migrations: %w", err)
	}
	return migrations.Up(migrations.Postgres, migrations.PostgresDir, drv)
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// ItemCount returns how many item rows the tenant has (storetest.ItemCounter; also handy for
// operators checking growth).
func (s *Store) ItemCount(ctx context.Context, tenant string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE tenant = $1`, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("count items: %w", interpretError(err))
	}
	return n, nil
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

// SecretGetOrCreate returns the named secret, storing Generate's value first if there is none.
// Concurrent callers race on INSERT … ON CONFLICT DO NOTHING and all read the winner's value.
func (s *Store) SecretGetOrCreate(ctx context.Context, p *store.SecretGetOrCreateParams) ([]byte, error) {
	var v []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, p.Name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get secret: %w", interpretError(err))
	}
	gen, err := p.Generate()
	if err != nil {
		return nil, fmt.Errorf("generate secret: %w", err)
	}
	if gen == nil {
		gen = []byte{}
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, p.Name, gen); err != nil {
		return nil, fmt.Errorf("insert secret: %w", interpretError(err))
	}
	if err := s.pool.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, p.Name).Scan(&v); err != nil {
		return nil, fmt.Errorf("get secret: %w", interpretError(err))
	}
	return v, nil
}

// nullString is s, or NULL when empty.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullJSON is raw, or NULL when empty or the JSON literal null.
func nullJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// objectJSON is raw, or {} when empty or null: conversation metadata is never null.
func objectJSON(raw json.RawMessage) []byte {
	if b := nullJSON(raw); b != nil {
		return b
	}
	return []byte(`{}`)
}

// timeOr returns t in UTC, or now when t is zero.
func timeOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now().UTC()
	}
	return t.UTC()
}

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

// insertItemsSQL inserts items ($3..$7, in order) for tenant $1 and response $2 (NULL: created
// directly in a conversation), and when $8 is a conversation id appends them to it in the same
// order at max(seq)+1…. The caller must hold the conversation's row lock (taken by an earlier
// statement, so this statement's snapshot sees every earlier append). Item pks are drawn in
// order before inserting so conversation_items can reference them in the same statement.
const insertItemsSQL = `
WITH u AS MATERIALIZED (
    SELECT nextval('items_pk_seq'::regclass) AS pk, u.role, u.position, u.id, u.type, u.data, u.ord
    FROM unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::text[])
        WITH ORDINALITY AS u(role, position, id, type, data, ord)
), ins AS (
    INSERT INTO items (pk, tenant, response_id, role, position, id, type, data)
    SELECT pk, $1, $2, NULLIF(role, ''), NULLIF(position, -1), id, type, data::json FROM u
)
INSERT INTO conversation_items (tenant, conversation_id, seq, item_pk)
SELECT $1, $8, base.next + u.ord - 1, u.pk
FROM u, (SELECT coalesce(max(seq), -1) + 1 AS next FROM conversation_items
         WHERE tenant = $1 AND conversation_id = $8) AS base
WHERE $8::text IS NOT NULL`

func queueInsertItems(b *pgx.Batch, tenant string, responseID, conversationID *string, a *itemArrays) {
	b.Queue(insertItemsSQL, tenant, responseID, a.roles, a.positions, a.ids, a.types, a.data, conversationID)
}

// scanItems reads rows of (id, type, data).
func scanItems(rows pgx.Rows) ([]wire.Item, error) {
	defer rows.Close()
	var out []wire.Item
	for rows.Next() {
		var it wire.Item
		var data []byte
		if err := rows.Scan(&it.ID, &it.Type, &data); err != nil {
			return nil, err
		}
		it.JSON = data
		out = append(out, it)
	}
	return out, rows.Err()
}
