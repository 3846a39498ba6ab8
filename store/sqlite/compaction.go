package sqlite

import (
	"context"

	"github.com/respgate/respgate/store"
)

// The compaction archive (migrations/sqlite/005).

var compactionQueries = store.CompactionQueries{
	Insert: `INSERT INTO compactions (tenant, id, response_id, model, replaced, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)`,
	Get:    `SELECT response_id, model, replaced, created_at FROM compactions WHERE tenant = ?1 AND id = ?2`,
}

// CompactionInsert archives what a summary replaced.
func (s *Store) CompactionInsert(ctx context.Context, p *store.CompactionInsertParams) error {
	return store.CompactionInsert(ctx, s.Driver, &compactionQueries, p)
}

// CompactionGet returns an archive record.
func (s *Store) CompactionGet(ctx context.Context, p *store.CompactionGetParams) (*store.Compaction, error) {
	return store.CompactionGet(ctx, s.Driver, &compactionQueries, p)
}
