package sqlite

import (
	"context"
	"sync"

	"github.com/respgate/respgate/store"
)

// maxGroup bounds how many commits one transaction carries.
const maxGroup = 64

// committer groups concurrent ResponseCommits into one transaction (group commit) without a
// goroutine of its own: the first caller to find no group writing becomes the leader and writes
// every commit queued so far, then hands the lead to the first commit queued meanwhile (or
// stands down when none is). A lone commit is written at once, by its own caller.
type committer struct {
	mu      sync.Mutex
	queue   []*pendingCommit
	writing bool
}

// pendingCommit is one queued commit. wake receives true when a leader has written it (err is
// its result), false when its caller is to lead the next group.
type pendingCommit struct {
	ctx  context.Context
	p    *store.ResponseCommitParams
	err  error
	wake chan bool
}

// run queues p and returns its result once a group carrying it has been written by write.
func (c *committer) run(ctx context.Context, p *store.ResponseCommitParams, write func([]*pendingCommit)) error {
	me := &pendingCommit{ctx: ctx, p: p, wake: make(chan bool, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, me)
	lead := !c.writing
	c.writing = true
	c.mu.Unlock()
	if !lead {
		// A leader always either writes this commit or hands the lead to it, and a write is
		// bounded by the statements' contexts, so this wait ends.
		if written := <-me.wake; written {
			return me.err
		}
	}
	c.mu.Lock()
	n := min(len(c.queue), maxGroup)
	group := c.queue[:n:n]
	c.queue = c.queue[n:]
	c.mu.Unlock()
	write(group)
	for _, o := range group {
		if o != me {
			o.wake <- true
		}
	}
	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		c.mu.Unlock()
		next.wake <- false
	} else {
		c.writing = false
		c.mu.Unlock()
	}
	return me.err
}
