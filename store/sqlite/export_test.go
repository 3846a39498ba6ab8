package sqlite

import "context"

// Pragma reads PRAGMA name on the store's connection.
func (s *Store) Pragma(ctx context.Context, name string) (string, error) {
	var v string
	err := s.db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v)
	return v, err
}
