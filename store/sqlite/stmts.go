package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStmts bounds the statement cache: the store's statements are the package's constants
// (a few dozen), so the bound is only a guard.
const maxCachedStmts = 256

// stmtCache keeps one prepared statement per query text on the store's one connection:
// modernc.org/sqlite prepares (parses and plans) every query it is given, which was about 6% of
// the gateway's CPU at 256 streams (the event-log appends and commits; docs/scaling.md). A
// transaction runs a cached statement through Tx.StmtContext, which reuses the statement already
// prepared on the connection.
//
// A statement is prepared on the database, which takes the one connection: never while this
// goroutine holds it in a transaction, which would wait for itself. So a transaction only reads
// the cache (lookup), and a query it misses runs unprepared once and is prepared by warm, which
// runs before a transaction begins, and by the calls outside transactions (get).
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt // nil value: wanted, not prepared yet
	// failed are queries whose preparation failed: they run unprepared from then on (their own
	// run reports the error).
	failed map[string]bool
	closed bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: make(map[string]*sql.Stmt), failed: make(map[string]bool)}
}

// lookup is q's prepared statement, or nil; a miss marks q to be prepared by the next warm.
func (c *stmtCache) lookup(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.m[q]
	if !ok && !c.closed && !c.failed[q] && len(c.m) < maxCachedStmts {
		c.m[q] = nil
	}
	return st
}

// warm prepares the statements lookup missed. The caller holds no transaction. The lock is not
// held while preparing, which waits for the connection: a transaction holding it may meanwhile
// look the cache up.
func (c *stmtCache) warm(ctx context.Context) {
	c.mu.Lock()
	var wanted []string
	for q, st := range c.m {
		if st == nil {
			wanted = append(wanted, q)
		}
	}
	c.mu.Unlock()
	for _, q := range wanted {
		p, err := c.db.PrepareContext(ctx, q)
		c.mu.Lock()
		cur, listed := c.m[q]
		switch {
		case err != nil && ctx.Err() == nil: // the query itself: it runs unprepared
			delete(c.m, q)
			c.failed[q] = true
		case err == nil && listed && cur == nil: // still wanted, and not prepared by another warm
			c.m[q] = p
			p = nil
		}
		c.mu.Unlock()
		if p != nil {
			_ = p.Close()
		}
	}
}

// get is q prepared (or nil: run it unprepared), for a call outside a transaction.
func (c *stmtCache) get(ctx context.Context, q string) *sql.Stmt {
	if st := c.lookup(q); st != nil {
		return st
	}
	c.warm(ctx)
	return c.lookup(q)
}

// close closes every cached statement (Store.Close, before the database).
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for q, st := range c.m {
		if st != nil {
			_ = st.Close()
		}
		delete(c.m, q)
	}
}

// txn is a transaction whose queries run as the cache's prepared statements.
type txn struct {
	*sql.Tx
	stmts *stmtCache
}

// stmt is q as a statement of the transaction (nil: run q unprepared).
func (t *txn) stmt(ctx context.Context, q string) *sql.Stmt {
	if st := t.stmts.lookup(q); st != nil {
		return t.Tx.StmtContext(ctx, st)
	}
	return nil
}

func (t *txn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := t.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, q, args...)
}

func (t *txn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, q, args...)
}

func (t *txn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, q, args...)
}

// PrepareContext is q as a statement of the transaction, from the cache when it can be.
func (t *txn) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	if st := t.stmt(ctx, q); st != nil {
		return st, nil
	}
	return t.Tx.PrepareContext(ctx, q)
}
