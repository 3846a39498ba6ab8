// Package sqlite is the embedded store.Store backend (DESIGN §3, §8: the zero-setup default), on
// modernc.org/sqlite (pure Go). Open runs the embedded migrations (migrations/sqlite) with
// golang-migrate. The database is one file in WAL mode (or a private in-memory database) used
// through a single connection: SQLite has one writer anyway, and one connection serialises every
// transaction in process, which also keeps conversation seq dense. Every query filters on the
// tenant and uses placeholders only.
//
// JSON (items, the request echo, usage, error, incomplete_details, metadata) is stored as TEXT
// holding the caller's exact bytes. Times are INTEGER microseconds since the Unix epoch.
//
// It must not leak driver types through the store interface.
package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// maxChainDepth bounds ResponseChainGet's recursion so that a corrupt, cyclic chain cannot run
// forever; no real conversation comes near it.
const maxChainDepth = 100_000

// Memory is the dsn of a private in-memory database, gone when the Store is closed.
const Memory = ":memory:"

// connParams are applied to every connection: wait up to 10 s for a lock held by another
// process, enforce foreign keys, and take the write lock at BEGIN so two processes sharing the
// file cannot deadlock upgrading read locks.
const connParams = "_busy_timeout=10000&_foreign_keys=1&_txlock=immediate"

// Store is the SQLite store.Store. Safe for concurrent use (calls are serialised).
type Store struct {
	db *sql.DB
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at dsn, a file path or Memory, applies pending
// migrations and returns a ready Store. A new file is created 0600 and missing folders 0700: it
// holds prompts and the server secret. The caller must Close the Store.
func Open(ctx context.Context, dsn string) (*Store, error) {
	name, err := connName(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	// One connection, kept open for the Store's life (an in-memory database lives as long as a
	// connection to it).
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	if err := migrate(name); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{db: db}, nil
}

// connName turns a dsn into the driver's connection string.
func connName(dsn string) (string, error) {
	if dsn == "" {
		return "", errors.New("open sqlite: empty dsn (want a file path or :memory:)")
	}
	if dsn == Memory {
		// A named memdb database is shared by this Store's connections (the main one and the
		// migration one) and by nothing else; WAL does not apply in memory.
		var b [12]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		return "file:/respgate-" + hex.EncodeToString(b[:]) + "?vfs=memdb&" + connParams, nil
	}
	path, err := filepath.Abs(dsn)
	if err != nil {
		return "", fmt.Errorf("open sqlite: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("open sqlite: create folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: path is the operator's --database-url
	switch {
	case err == nil:
		_ = f.Close() // SQLite initialises an empty file as a new database
	case !errors.Is(err, fs.ErrExist):
		return "", fmt.Errorf("open sqlite: create file: %w", err)
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path)}
	// url.URL writes "file:///abs"; SQLite reads the authority-less "file:/abs" the same way.
	return u.String() + "?_journal_mode=WAL&_synchronous=NORMAL&" + connParams, nil
}

// migrate applies the embedded migrations through golang-migrate on a connection of its own,
// closed afterwards.
func migrate(name string) error {
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return fmt.Errorf("start sqlite migrations: %w", err)
	}
	db.SetMaxOpenConns(1)
	drv, err := sqlitemigrate.WithInstance(db, &sqlitemigrate.Config{})
	if err != nil {
		_ = db.Close()
		return fmt.Errorf("start sqlite migrations: %w", err)
	}
	return migrations.Up(migrations.SQLite, migrations.SQLiteDir, drv)
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	return nil
}

// Close closes the database; an in-memory one is gone afterwards. It first lets SQLite refresh
// the planner statistics it finds stale (PRAGMA optimize, as SQLite advises before closing).
func (s *Store) Close() error {
	_, _ = s.db.Exec(`PRAGMA optimize`)
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close sqlite: %w", err)
	}
	return nil
}

// ItemCount returns how many item rows the tenant has (storetest.ItemCounter; also handy for
// operators checking growth).
func (s *Store) ItemCount(ctx context.Context, tenant string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM items WHERE tenant = ?1`, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("count items: %w", interpretError(err))
	}
	return n, nil
}

// interpretError maps driver errors to the store's sentinels: no rows is ErrNotFound, a unique
// or primary key violation ErrConflict. Anything else passes through unchanged.
func interpretError(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w (%s)", store.ErrConflict, se.Error())
		}
	}
	return err
}

// SecretGetOrCreate returns the named secret, storing Generate's value first if there is none.
func (s *Store) SecretGetOrCreate(ctx context.Context, p *store.SecretGetOrCreateParams) ([]byte, error) {
	var v []byte
	err := s.db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?1`, p.Name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get secret: %w", interpretError(err))
	}
	gen, err := p.Generate()
	if err != nil {
		return nil, fmt.Errorf("generate secret: %w", err)
	}
	if gen == nil {
		gen = []byte{}
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO secrets (name, value, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO NOTHING`,
		p.Name, gen, time.Now().UnixMicro()); err != nil {
		return nil, fmt.Errorf("insert secret: %w", interpretError(err))
	}
	if err := s.db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?1`, p.Name).Scan(&v); err != nil {
		return nil, fmt.Errorf("get secret: %w", interpretError(err))
	}
	return v, nil
}

// inTx runs fn in a transaction, committing if it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", interpretError(err))
	}
	return nil
}

// nullString is s, or NULL when empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullJSON is raw as TEXT, or NULL when empty or the JSON literal null.
func nullJSON(raw json.RawMessage) any {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return string(raw)
}

// objectJSON is raw, or {} when empty or null: conversation metadata is never null.
func objectJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	return string(raw)
}

// micros encodes a time; the zero time becomes now.
func micros(t time.Time) int64 {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UnixMicro()
}

func nullMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

// insertItems inserts items for a response (role input/output, positions 0…) or, with role
// empty, directly for a conversation; when conv is set it appends each to conv at *seq, *seq+1….
// The caller runs it inside a transaction.
func insertItems(ctx context.Context, tx *sql.Tx, tenant string, responseID any, role string, items []wire.Item, conv string, seq *int64) error {
	if len(items) == 0 {
		return nil
	}
	ins, err := tx.PrepareContext(ctx, `INSERT INTO items (tenant, response_id, role, position, id, type, data)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`)
	if err != nil {
		return fmt.Errorf("insert items: %w", err)
	}
	defer ins.Close()
	var app *sql.Stmt
	if conv != "" {
		if app, err = tx.PrepareContext(ctx, `INSERT INTO conversation_items (tenant, conversation_id, seq, item_pk)
			VALUES (?1, ?2, ?3, ?4)`); err != nil {
			return fmt.Errorf("insert items: %w", err)
		}
		defer app.Close()
	}
	for i, it := range items {
		var pos any = i
		if role == "" {
			pos = nil
		}
		res, err := ins.ExecContext(ctx, tenant, responseID, nullString(role), pos, it.ID, it.Type, string(it.JSON))
		if err != nil {
			return fmt.Errorf("insert items: %w", interpretError(err))
		}
		if app == nil {
			continue
		}
		pk, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("insert items: %w", err)
		}
		if _, err := app.ExecContext(ctx, tenant, conv, *seq, pk); err != nil {
			return fmt.Errorf("append items: %w", interpretError(err))
		}
		*seq++
	}
	return nil
}

// nextSeq returns the conversation's next seq. The caller holds the write lock (every
// transaction here does: _txlock=immediate and a single connection).
func nextSeq(ctx context.Context, tx *sql.Tx, tenant, conv string) (int64, error) {
	var n int64
	err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), -1) + 1 FROM conversation_items
		WHERE tenant = ?1 AND conversation_id = ?2`, tenant, conv).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("next seq: %w", err)
	}
	return n, nil
}

// scanItems reads rows of (id, type, data).
func scanItems(rows *sql.Rows) ([]wire.Item, error) {
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
