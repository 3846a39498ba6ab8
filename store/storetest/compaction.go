package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
)

// The compaction archive (docs/compaction.md).
var compactionCases = []storeCase{
	{"a compaction archive record round-trips, per tenant, once", testCompactionArchive},
}

func testCompactionArchive(t *testing.T, s store.Store) {
	ctx := context.Background()
	rec := store.Compaction{ID: "cmp_1", Tenant: "t1", ResponseID: "resp_1", Model: "m", CreatedAt: time.UnixMicro(1_700_000_000_123_456).UTC(),
		Replaced: []store.CompactedItem{{ItemID: "msg_1", SHA256: "aa"}, {ItemID: "fc_2", SHA256: "bb"}}}
	if err := s.CompactionInsert(ctx, &store.CompactionInsertParams{Compaction: rec}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	got, err := s.CompactionGet(ctx, &store.CompactionGetParams{Tenant: "t1", ID: "cmp_1"})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.ResponseID != rec.ResponseID || got.Model != rec.Model || !got.CreatedAt.Equal(rec.CreatedAt) || !slices.Equal(got.Replaced, rec.Replaced) {
		t.Fatalf("got %+v, want %+v", got, rec)
	}
	if _, err := s.CompactionGet(ctx, &store.CompactionGetParams{Tenant: "t2", ID: "cmp_1"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's record: %v, want ErrNotFound", err)
	}
	if err := s.CompactionInsert(ctx, &store.CompactionInsertParams{Compaction: rec}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second insert: %v, want ErrConflict", err)
	}
	empty := store.Compaction{ID: "cmp_2", Tenant: "t1", Model: "m"}
	if err := s.CompactionInsert(ctx, &store.CompactionInsertParams{Compaction: empty}); err != nil {
		t.Fatalf("insert without replaced items: %v", err)
	}
	if got, err := s.CompactionGet(ctx, &store.CompactionGetParams{Tenant: "t1", ID: "cmp_2"}); err != nil || len(got.Replaced) != 0 || got.ResponseID != "" {
		t.Fatalf("empty record: %+v %v", got, err)
	}
}
