package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sinkLog is a Sink on the bubble's clock that records when keepalives were written.
type sinkLog struct {
	mu         sync.Mutex
	start      time.Time
	last       time.Time
	keepalives []time.Duration
	fail       bool
}

func (s *sinkLog) Write([]byte) error { return nil }

func (s *sinkLog) Keepalive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("broken pipe (injected)")
	}
	s.last = time.Now()
	s.keepalives = append(s.keepalives, s.last.Sub(s.start))
	return nil
}

func (s *sinkLog) IdleSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// testServer is an Engine with only what the stream watcher reads: KeepAlive and the shutdown
// context; shutdown cuts the streams as Shutdown past its deadline does.
func testServer(keepAlive time.Duration) (s *Engine, shutdown func()) {
	s = &Engine{cfg: Config{KeepAlive: keepAlive}}
	s.stopCtx, s.stopCancel = context.WithCancel(context.Background())
	return s, s.stopCancel
}

// watch runs watchStream on sink until the returned stop is called; stop waits for it and
// returns the cause the watcher cancelled the stream with (nil: none).
func watch(ctx context.Context, s *Engine, sink Sink) (stop func() error) {
	ctx, cancel := context.WithCancelCause(ctx)
	sw := s.watchStream(cancel, sink)
	return func() error {
		sw.stop()
		cause := context.Cause(ctx)
		cancel(nil)
		return cause
	}
}

// During upstream silence a keepalive goes out once the stream has been idle for KeepAlive, and
// not before.
func TestWatchStreamSendsAKeepaliveAfterKeepAliveOfSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := testServer(1500 * time.Millisecond)
		sink := &sinkLog{start: time.Now(), last: time.Now()}
		stop := watch(t.Context(), s, sink)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if cause := stop(); cause != nil {
			t.Fatalf("the watcher cut a healthy stream: %v", cause)
		}
		want := []time.Duration{1500 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond}
		if len(sink.keepalives) != len(want) {
			t.Fatalf("keepalives at %v, want %v", sink.keepalives, want)
		}
		for i := range want {
			if sink.keepalives[i] != want[i] {
				t.Fatalf("keepalives at %v, want %v", sink.keepalives, want)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// A write in between postpones the keepalive: it is due KeepAlive after the last write.
		s, _ := testServer(10*time.Second + 500*time.Millisecond)
		sink := &sinkLog{start: time.Now(), last: time.Now()}
		stop := watch(t.Context(), s, sink)
		time.Sleep(4 * time.Second)
		sink.mu.Lock()
		sink.last = time.Now() // an event was written at 4s
		sink.mu.Unlock()
		time.Sleep(12 * time.Second)
		synctest.Wait()
		_ = stop()
		if len(sink.keepalives) != 1 || sink.keepalives[0] != 14*time.Second+500*time.Millisecond {
			t.Fatalf("keepalives at %v, want one at 14.5s", sink.keepalives)
		}
	})
}

// A keepalive that cannot be written means the client is gone; shutdown past its deadline cuts
// the stream with ErrShutdown; a watch stopped at the stream's end cancels nothing afterwards.
func TestWatchStreamCutsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := testServer(time.Second)
		stop := watch(t.Context(), s, &sinkLog{start: time.Now(), last: time.Now(), fail: true})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if cause := stop(); !errors.Is(cause, ErrClientGone) {
			t.Fatalf("a failed keepalive: cause %v, want ErrClientGone", cause)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s, shutdown := testServer(time.Minute)
		stop := watch(t.Context(), s, &sinkLog{start: time.Now(), last: time.Now()})
		shutdown()
		synctest.Wait()
		if cause := stop(); !errors.Is(cause, ErrShutdown) {
			t.Fatalf("shutdown: cause %v, want ErrShutdown", cause)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s, shutdown := testServer(time.Minute)
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		sw := s.watchStream(cancel, &sinkLog{start: time.Now(), last: time.Now(), fail: true})
		sw.stop()  // the stream ended
		shutdown() // too late: the watch has stopped
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if cause := context.Cause(ctx); cause != nil {
			t.Fatalf("a stopped watch cancelled the stream: %v", cause)
		}
	})
}
