package migrations_test

import (
	"slices"
	"testing"

	"github.com/respgate/respgate/migrations"
)

func TestBackendsShareVersionNumbers(t *testing.T) {
	pg, err := migrations.Versions(migrations.Postgres, migrations.PostgresDir)
	if err != nil {
		t.Fatal(err)
	}
	lite, err := migrations.Versions(migrations.SQLite, migrations.SQLiteDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(pg) == 0 {
		t.Fatal("no Postgres migrations embedded")
	}
	if !slices.Equal(pg, lite) {
		t.Fatalf("migration versions differ: postgres %v, sqlite %v; add a placeholder migration so both have the same numbers", pg, lite)
	}
}

func TestVersionsStartAtOneWithoutGaps(t *testing.T) {
	pg, err := migrations.Versions(migrations.Postgres, migrations.PostgresDir)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range pg {
		if v != uint(i+1) {
			t.Fatalf("versions %v: want 1..%d without gaps", pg, len(pg))
		}
	}
}
