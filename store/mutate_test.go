//go:build mutate

package store_test

import (
	"testing"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/store/storetest"
)

// The shared store logic (this package) is tested by the conformance suite, which runs from the
// backends' packages. Mutation testing runs a mutant with the tests of the mutated package only,
// so under the mutate build tag (`make mutate`, docs/testing.md) this package runs the suite
// against both backends too. `make test` leaves it out: the backends' packages already run it.

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformanceSQLite(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(t.Context(), sqlite.Memory)
		if err != nil {
			t.Fatalf("open in-memory sqlite store: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestConformancePostgres(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := postgres.Open(t.Context(), pgtest.DSN(t))
		if err != nil {
			t.Fatalf("open postgres store: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
