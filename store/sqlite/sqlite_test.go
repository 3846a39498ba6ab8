package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore opens a store on a fresh file in tb's temporary directory.
func newStore(tb testing.TB) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "respgate.db"))
	if err != nil {
		tb.Fatalf("open sqlite store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return newStore(t) })
}

func TestConformanceInMemory(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(t.Context(), sqlite.Memory)
		if err != nil {
			t.Fatalf("open in-memory sqlite store: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestOpenCreatesPrivateFileAndFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested")
	path := filepath.Join(dir, "respgate.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o700}, {filepath.Dir(dir), 0o700}, {path, 0o600}} {
		st, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != c.mode {
			t.Errorf("%s has mode %v, want %v", c.path, got, c.mode)
		}
	}
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "respgate.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ConversationCreate(t.Context(), &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_1", Tenant: "t"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.ConversationGet(t.Context(), &store.ConversationGetParams{Tenant: "t", ID: "conv_1"}); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

func TestInMemoryStoresAreSeparate(t *testing.T) {
	a, err := sqlite.Open(t.Context(), sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(t.Context(), sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.ConversationCreate(t.Context(), &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_1", Tenant: "t"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ConversationGet(t.Context(), &store.ConversationGetParams{Tenant: "t", ID: "conv_1"}); err == nil {
		t.Fatal("a second in-memory store sees the first one's data")
	}
}

func BenchmarkCommitTurn(b *testing.B) {
	storetest.BenchmarkCommit(b, newStore(b))
}

func BenchmarkBegin(b *testing.B) {
	storetest.BenchmarkBegin(b, newStore(b))
}

func BenchmarkChainGet(b *testing.B) {
	for _, depth := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			storetest.BenchmarkChainGet(b, newStore(b), depth)
		})
	}
}

func BenchmarkChainWarm(b *testing.B) {
	for _, depth := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			storetest.BenchmarkChainWarm(b, newStore(b), depth)
		})
	}
}

func BenchmarkChainForked(b *testing.B) {
	storetest.BenchmarkChainForked(b, newStore(b), 1000, 10)
}

func BenchmarkCommitParallel(b *testing.B) {
	b.SetParallelism(8)
	storetest.BenchmarkCommitParallel(b, newStore(b))
}

// The connection settings a file store runs with (connName): WAL with synchronous=NORMAL,
// foreign keys enforced, a busy timeout, and temporary files (the savepoints' sub-journals of
// grouped commits) in memory.
func TestConnectionSettings(t *testing.T) {
	s := newStore(t)
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"synchronous":  "1", // NORMAL
		"foreign_keys": "1",
		"busy_timeout": "10000",
		"temp_store":   "2", // MEMORY
	} {
		got, err := s.Pragma(t.Context(), pragma)
		if err != nil {
			t.Fatalf("PRAGMA %s: %v", pragma, err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
}
