package postgres

import "context"

// Hooks for the package's external tests (notify_test.go).

// ChannelFor is channelFor.
var ChannelFor = channelFor

// Channel is the store's notification channel.
func (s *Store) Channel() string { return s.watch.channel }

// Notify sends a notification of id on the store's channel, as a notifying write does.
func (s *Store) Notify(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, notifySQL, s.watch.channel, id)
	return err
}

// ListenerRunning reports whether the store's listener goroutine is running.
func (s *Store) ListenerRunning() bool {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.cancel != nil || s.watch.done != nil
}

// Exec runs sql on the store's pool.
func (s *Store) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := s.pool.Exec(ctx, sql, args...)
	return err
}

// ListenerGoroutines is the number of listener goroutines that have not returned.
func (s *Store) ListenerGoroutines() int { return int(s.watch.running.Load()) }
