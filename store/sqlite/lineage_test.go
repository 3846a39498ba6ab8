package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"

	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/store/storetest"
	"github.com/respgate/respgate/wire"
)

// TestUpgradeFromVersion3 fills a database laid out as schema version 3 (before lineage,
// migrations/sqlite/006) with the old SQL, lets Open migrate it, and checks every chain.
func TestUpgradeFromVersion3(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "respgate.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_foreign_keys=1")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		return db
	}
	drv, err := sqlitemigrate.WithInstance(open(), &sqlitemigrate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.UpTo(migrations.SQLite, migrations.SQLiteDir, drv, 3); err != nil {
		t.Fatalf("migrate to version 3: %v", err)
	}
	db := open()
	fixture := storetest.LegacyFixture(t)
	for _, f := range fixture {
		var prev any
		if f.Prev != "" {
			prev = f.Prev
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO responses (tenant, id, status, model, previous_response_id, created_at, echo)
VALUES (?1, ?2, ?3, 'm', ?4, ?5, '{}')`, f.Tenant, f.ID, string(f.Status), prev, f.CreatedAt.UnixMicro()); err != nil {
			t.Fatalf("insert %s: %v", f.ID, err)
		}
		for role, items := range map[string][]wire.Item{"input": f.Input, "output": f.Output} {
			for pos, it := range items {
				if _, err := db.ExecContext(ctx, `INSERT INTO items (tenant, response_id, role, position, id, type, data)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`, f.Tenant, f.ID, role, pos, it.ID, it.Type, string(it.JSON)); err != nil {
					t.Fatalf("insert item: %v", err)
				}
			}
		}
		for _, it := range f.Detached {
			if _, err := db.ExecContext(ctx, `INSERT INTO items (tenant, id, type, data) VALUES (?1, ?2, ?3, ?4)`,
				f.Tenant, it.ID, it.Type, string(it.JSON)); err != nil {
				t.Fatalf("insert detached item: %v", err)
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("open (migrate up from 3): %v", err)
	}
	defer s.Close()
	storetest.CheckUpgrade(t, s, fixture)
}

// TestLineageLayout: storetest.LineageLayout, reading the rows through a second connection to
// the store's file.
func TestLineageLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "respgate.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	storetest.LineageLayout(t, s, func(id string) storetest.Lineage {
		var l storetest.Lineage
		err := db.QueryRowContext(t.Context(), `SELECT branch, depth, coalesce(fork_branch, -1) FROM responses WHERE id = ?1`, id).
			Scan(&l.Branch, &l.Depth, &l.Fork)
		if err != nil {
			t.Fatalf("lineage of %s: %v", id, err)
		}
		return l
	})
}
