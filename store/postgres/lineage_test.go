package postgres_test

import (
	"context"
	"testing"

	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/storetest"
	"github.com/respgate/respgate/wire"
)

// TestUpgradeFromVersion3 fills a database laid out as schema version 3 (before lineage,
// migrations/postgres/006) with the old SQL, lets Open migrate it, and checks every chain.
func TestUpgradeFromVersion3(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.UpTo(migrations.Postgres, migrations.PostgresDir, drv, 3); err != nil {
		t.Fatalf("migrate to version 3: %v", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	fixture := storetest.LegacyFixture(t)
	for _, f := range fixture {
		var prev any
		if f.Prev != "" {
			prev = f.Prev
		}
		if _, err := conn.Exec(ctx, `INSERT INTO responses (tenant, id, status, model, previous_response_id, created_at, echo)
VALUES ($1, $2, $3, 'm', $4, $5, '{}')`, f.Tenant, f.ID, f.Status, prev, f.CreatedAt); err != nil {
			t.Fatalf("insert %s: %v", f.ID, err)
		}
		for role, items := range map[string][]wire.Item{"input": f.Input, "output": f.Output} {
			for pos, it := range items {
				if _, err := conn.Exec(ctx, `INSERT INTO items (tenant, response_id, role, position, id, type, data)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, f.Tenant, f.ID, role, pos, it.ID, it.Type, string(it.JSON)); err != nil {
					t.Fatalf("insert item: %v", err)
				}
			}
		}
		for _, it := range f.Detached {
			if _, err := conn.Exec(ctx, `INSERT INTO items (tenant, id, type, data) VALUES ($1, $2, $3, $4)`,
				f.Tenant, it.ID, it.Type, string(it.JSON)); err != nil {
				t.Fatalf("insert detached item: %v", err)
			}
		}
	}
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open (migrate up from 3): %v", err)
	}
	defer s.Close()
	storetest.CheckUpgrade(t, s, fixture)
}

// TestLineageLayout: storetest.LineageLayout, reading the rows through a connection of its own.
func TestLineageLayout(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := newStoreAt(t, dsn)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	storetest.LineageLayout(t, s, func(id string) storetest.Lineage {
		var l storetest.Lineage
		err := conn.QueryRow(t.Context(), `SELECT branch, depth, coalesce(fork_branch, -1) FROM responses WHERE id = $1`, id).
			Scan(&l.Branch, &l.Depth, &l.Fork)
		if err != nil {
			t.Fatalf("lineage of %s: %v", id, err)
		}
		return l
	})
}
