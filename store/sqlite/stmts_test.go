package sqlite

import (
	"context"
	"testing"
)

// A query first run in a transaction runs unprepared and is prepared before the next transaction
// begins (never inside one, where preparing would wait for the connection the transaction
// holds); a call outside a transaction prepares at once; a query that cannot be prepared runs
// unprepared and reports its own error; a preparation cut by its context is tried again.
func TestStatementsArePreparedOutsideTransactionsAndKept(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, Memory)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	state := func(q string) (prepared, wanted, failed bool) {
		s.stmts.mu.Lock()
		defer s.stmts.mu.Unlock()
		st, ok := s.stmts.m[q]
		return st != nil, ok && st == nil, s.stmts.failed[q]
	}
	count := func(q string) {
		t.Helper()
		if err := s.inTx(ctx, func(tx *txn) error {
			var n int
			return tx.QueryRowContext(ctx, q, "t").Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
	}

	q := `SELECT count(*) FROM responses WHERE tenant = ?1`
	count(q)
	if p, w, _ := state(q); p || !w {
		t.Fatalf("after a first run in a transaction: prepared %v, wanted %v; want wanted only", p, w)
	}
	count(q)
	if p, _, _ := state(q); !p {
		t.Fatal("not prepared before the second transaction")
	}

	direct := `SELECT count(*) FROM conversations WHERE tenant = ?1`
	var n int
	if err := s.Driver.QueryRow(ctx, direct, "t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := state(direct); !p {
		t.Fatal("a call outside a transaction did not prepare its query")
	}

	bad := `SELECT nothing FROM nowhere`
	if _, err := s.Driver.Exec(ctx, bad); err == nil {
		t.Fatal("a query of no table ran")
	}
	if p, w, f := state(bad); p || w || !f {
		t.Fatalf("a query that cannot be prepared: prepared %v, wanted %v, failed %v; want failed only", p, w, f)
	}

	cut := `SELECT count(*) FROM items WHERE tenant = ?1`
	s.stmts.lookup(cut)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	s.stmts.warm(cancelled)
	if p, w, f := state(cut); p || !w || f {
		t.Fatalf("a preparation cut by its context: prepared %v, wanted %v, failed %v; want still wanted", p, w, f)
	}
}
