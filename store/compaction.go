package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// The compaction archive (docs/compaction.md, migrations/*/005): what each compaction item's
// summary replaced, by item id and SHA-256 of the item's stored bytes, so an operator can audit a
// summary against the originals, which stay stored.

// Compaction is one archive record.
type Compaction struct {
	ID     string // the compaction item's id (cmp_…)
	Tenant string
	// ResponseID is the response whose turn compacted (automatic compaction), or the id of the
	// answer of POST /v1/responses/compact that returned the item.
	ResponseID string
	Model      string
	CreatedAt  time.Time
	Replaced   []CompactedItem
}

// CompactedItem is one item a summary replaced.
type CompactedItem struct {
	ItemID string `json:"item_id"`
	SHA256 string `json:"sha256"`
}

type CompactionInsertParams struct {
	Compaction Compaction
}

type CompactionGetParams struct {
	Tenant string
	ID     string
}

// CompactionQueries are a backend's statements of the archive.
type CompactionQueries struct {
	Insert string // (tenant, id, response_id, model, replaced JSON, created_at)
	Get    string // (tenant, id) → response_id, model, replaced, created_at
}

// CompactionInsert runs q.Insert on d (the logic both backends share).
func CompactionInsert(ctx context.Context, d Driver, q *CompactionQueries, p *CompactionInsertParams) error {
	c := &p.Compaction
	replaced := c.Replaced
	if replaced == nil {
		replaced = []CompactedItem{}
	}
	b, err := json.Marshal(replaced)
	if err != nil {
		return fmt.Errorf("archive compaction: %w", err)
	}
	created := c.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	_, err = exec(ctx, d, "archive compaction", nil, q.Insert, c.Tenant, c.ID, c.ResponseID, c.Model, d.JSON(b), d.Time(created))
	return err
}

// CompactionGet runs q.Get on d.
func CompactionGet(ctx context.Context, d Driver, q *CompactionQueries, p *CompactionGetParams) (*Compaction, error) {
	c := &Compaction{ID: p.ID, Tenant: p.Tenant}
	var replaced []byte
	var created nullTime
	if err := d.QueryRow(ctx, q.Get, p.Tenant, p.ID).Scan(&c.ResponseID, &c.Model, &replaced, &created); err != nil {
		return nil, fmt.Errorf("get compaction: %w", d.InterpretError(err))
	}
	if err := json.Unmarshal(replaced, &c.Replaced); err != nil {
		return nil, fmt.Errorf("get compaction: %w", err)
	}
	c.CreatedAt = created.t
	return c, nil
}
