package opstest

import (
	"testing"

	"github.com/respgate/respgate/internal/pgtest"
)

// TestMain finds (or starts) the Postgres the live respgate stores in (internal/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }
