package engine

import (
	"sync"
	"time"
)

// timerTask is the shape the lease keeper and the stream watch share: work a timer runs beside a
// turn, on a short-lived goroutine when due, holding none while it waits (issue 25: goroutines
// per open stream). A callback runs only while the task has not been stopped; the timer's
// callback runs one at a time and re-arms the timer as it ends; stop waits for every callback
// still running, so nothing of the task runs after stop has returned.
type timerTask struct {
	mu      sync.Mutex
	stopped bool
	busy    bool // the timer's callback is running
	timer   *time.Timer
	running sync.WaitGroup
}

// start arms the timer to run f after d. f returns when to run again (again false: no more);
// the timer is re-armed under the same lock that ends the callback, so a timer due at once
// waits for it to end and then runs. f never runs after stop.
func (tt *timerTask) start(d time.Duration, f func() (next time.Duration, again bool)) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.timer = time.AfterFunc(d, func() {
		tt.mu.Lock()
		if tt.stopped || tt.busy {
			tt.mu.Unlock()
			return
		}
		tt.busy = true
		tt.running.Add(1)
		tt.mu.Unlock()
		defer tt.running.Done()
		next, again := f()
		tt.mu.Lock()
		defer tt.mu.Unlock()
		tt.busy = false
		if again && !tt.stopped {
			tt.timer.Reset(next)
		}
	})
}

// fireNow makes the timer fire at once, unless the task was stopped, its callback is running
// (it re-arms the timer itself), or now says no.
func (tt *timerTask) fireNow(now func() bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if !tt.stopped && !tt.busy && now() {
		tt.timer.Reset(0)
	}
}

// run runs f now as one of the task's callbacks (beside the timer's: a context.AfterFunc's),
// unless the task was stopped.
func (tt *timerTask) run(f func()) {
	tt.mu.Lock()
	if tt.stopped {
		tt.mu.Unlock()
		return
	}
	tt.running.Add(1)
	tt.mu.Unlock()
	defer tt.running.Done()
	f()
}

// stop stops the task and waits for its callbacks still running. Safe more than once.
func (tt *timerTask) stop() {
	tt.halt()
	tt.running.Wait()
}

// halt stops the task without waiting: no callback starts after it (one running goes on). The
// caller can then end what a running callback waits for, and wait (stop).
func (tt *timerTask) halt() {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.stopped = true
	tt.timer.Stop()
}
