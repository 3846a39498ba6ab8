package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestDSNGivesEachTestItsOwnSchemaAndDropsIt(t *testing.T) {
	ctx := t.Context()
	var schema string
	t.Run("inner", func(t *testing.T) {
		a, b := pgtest.DSN(t), pgtest.DSN(t)
		ca := mustConnect(t, a)
		cb := mustConnect(t, b)
		if err := ca.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
			t.Fatal(err)
		}
		var other string
		if err := cb.QueryRow(ctx, "SELECT current_schema()").Scan(&other); err != nil {
			t.Fatal(err)
		}
		if schema == "" || schema == other || schema == "public" {
			t.Fatalf("schemas %q and %q: want two distinct fresh schemas", schema, other)
		}
		if _, err := ca.Exec(ctx, "CREATE TABLE only_here (x int)"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here' AND schemaname = current_schema()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatal("a table created in one test schema is visible in another")
		}
	})
	// The inner test's cleanups have run: its schemas are gone.
	c := mustConnect(t, pgtest.DSN(t))
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("schema %s still exists after its test ended", schema)
	}
}

func mustConnect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.WithoutCancel(t.Context())) })
	return c
}
