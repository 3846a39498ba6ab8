// Package sqlite is the embedded store.Store backend (docs/design.md §3, §8: the zero-setup default), on
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

	"github.com/golang-migrate/migrate/v4/database"
	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/jobq"
	"github.com/respgate/respgate/wire"
)

// Memory is the dsn of a private in-memory database, gone when the Store is closed.
const Memory = ":memory:"

// connParams are applied to every connection: wait up to 10 s for a lock held by another
// process, enforce foreign keys, take the write lock at BEGIN so two processes sharing the
// file cannot deadlock upgrading read locks, and keep temporary files in memory. The last
// matters to every commit: each one of a group runs under a savepoint (commitGroup), whose
// sub-journal holds a copy of every page the commit changes; on disk, that is a file created,
// written and deleted per transaction once it passes 64 KiB (docs/scaling.md, "SQLite's CPU").
const connParams = "_busy_timeout=10000&_foreign_keys=1&_txlock=immediate&_pragma=temp_store(memory)"

// Store is the SQLite store.Store. Safe for concurrent use (calls are serialised).
type Store struct {
	store.Base
	db      *sql.DB
	stmts   *stmtCache            // prepared statements of the one connection (stmts.go)
	commits committer             // groups concurrent ResponseCommits (group.go)
	jobs    *jobq.Client[*sql.Tx] // River, in this database (background.go)
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
	stmts := newStmtCache(db)
	s := &Store{Base: store.Base{Driver: driver{db, stmts}, Queries: &queries}, db: db, stmts: stmts}
	if err := s.openJobs(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
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
	drv, err := migrationDriver(name)
	if err != nil {
		return err
	}
	return migrations.Up(migrations.SQLite, migrations.SQLiteDir, drv)
}

// migrationDriver opens golang-migrate's driver on a connection of its own (closed with it).
func migrationDriver(name string) (database.Driver, error) {
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return nil, fmt.Errorf("start sqlite migrations: %w", err)
	}
	db.SetMaxOpenConns(1)
	drv, err := sqlitemigrate.WithInstance(db, &sqlitemigrate.Config{})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("start sqlite migrations: %w", err)
	}
	return drv, nil
}

// MigrationDriver is golang-migrate's driver on the existing database file at path, for
// `respgate admin migrate` (migrations.Status, Up, Down close it). Unlike Open it applies
// nothing, and it refuses a path where no database is rather than create one.
func MigrationDriver(path string) (database.Driver, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("open sqlite: no database at %s: %w", abs, err)
	}
	name, err := connName(abs)
	if err != nil {
		return nil, err
	}
	return migrationDriver(name)
}

// Close closes the database; an in-memory one is gone afterwards. It first lets SQLite refresh
// the planner statistics it finds stale (PRAGMA optimize, as SQLite advises before closing).
func (s *Store) Close() error {
	// A River client still working would use the database after it closes: stop it first (a
	// no-op when the background package already did).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.jobs.Stop(ctx)
	_, _ = s.db.Exec(`PRAGMA optimize`)
	s.stmts.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close sqlite: %w", err)
	}
	return nil
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

// driver adapts the database to store.Driver.
type driver struct {
	db    *sql.DB
	stmts *stmtCache
}

// rows adapts *sql.Rows to store.Rows.
type rows struct{ *sql.Rows }

func (r rows) Close() { _ = r.Rows.Close() }

func (d driver) Ping(ctx context.Context) error {
	if err := d.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	return nil
}

func (d driver) Query(ctx context.Context, q string, args ...any) (store.Rows, error) {
	var r *sql.Rows
	var err error
	if st := d.stmts.get(ctx, q); st != nil {
		r, err = st.QueryContext(ctx, args...)
	} else {
		r, err = d.db.QueryContext(ctx, q, args...)
	}
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

func (d driver) QueryRow(ctx context.Context, q string, args ...any) store.Row {
	if st := d.stmts.get(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.db.QueryRowContext(ctx, q, args...)
}

func (d driver) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	var res sql.Result
	var err error
	if st := d.stmts.get(ctx, q); st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = d.db.ExecContext(ctx, q, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (driver) InterpretError(err error) error { return interpretError(err) }

// Time is t as INTEGER microseconds since the Unix epoch.
func (driver) Time(t time.Time) any { return t.UnixMicro() }

// JSON is raw's exact bytes as TEXT, or NULL.
func (driver) JSON(raw json.RawMessage) any {
	if b := store.NullJSON(raw); b != nil {
		return string(b)
	}
	return nil
}

// Strings is s as one JSON array, read back with json_each.
func (driver) Strings(s []string) (any, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// inTx runs fn in a transaction, committing if it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *txn) error) error {
	s.stmts.warm(ctx)
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	tx := &txn{Tx: sqlTx, stmts: s.stmts}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", interpretError(err))
	}
	return nil
}

// insertItems inserts items for a response (role input/output, positions 0…) or, with role
// empty, directly for a conversation; when conv is set it appends each to conv at *seq, *seq+1….
// The caller runs it inside a transaction.
func insertItems(ctx context.Context, tx *txn, tenant string, responseID any, role string, items []wire.Item, conv string, seq *int64) error {
	if len(items) == 0 {
		return nil
	}
	ins, err := tx.PrepareContext(ctx, insertItemSQL)
	if err != nil {
		return fmt.Errorf("insert items: %w", err)
	}
	defer ins.Close()
	var app *sql.Stmt
	if conv != "" {
		if app, err = tx.PrepareContext(ctx, appendItemSQL); err != nil {
			return fmt.Errorf("insert items: %w", err)
		}
		defer app.Close()
	}
	for i, it := range items {
		var pos any = i
		if role == "" {
			pos = nil
		}
		res, err := ins.ExecContext(ctx, tenant, responseID, store.NullString(role), pos, it.ID, it.Type, string(it.JSON))
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
func nextSeq(ctx context.Context, tx *txn, tenant, conv string) (int64, error) {
	var n int64
	if err := tx.QueryRowContext(ctx, nextSeqSQL, tenant, conv).Scan(&n); err != nil {
		return 0, fmt.Errorf("next seq: %w", err)
	}
	return n, nil
}

// exists checks, inside a transaction, that the row a (tenant, id) query finds exists
// (ErrNotFound if not).
func exists(ctx context.Context, tx *txn, q, tenant, id string) error {
	var one int
	return interpretError(tx.QueryRowContext(ctx, q, tenant, id).Scan(&one))
}

// guardedDelete runs, in one transaction, guard on (tenant, id, at), which reports whether a
// guard holds (then nothing changes and the error is held), then the statements on (tenant, id).
func (s *Store) guardedDelete(ctx context.Context, tenant, id string, at any, held error, guard string, stmts ...string) error {
	return s.inTx(ctx, func(tx *txn) error {
		var h bool
		if err := tx.QueryRowContext(ctx, guard, tenant, id, at).Scan(&h); err != nil {
			return interpretError(err)
		}
		if h {
			return held
		}
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, q, tenant, id); err != nil {
				return interpretError(err)
			}
		}
		return nil
	})
}
