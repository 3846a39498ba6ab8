package store

import (
	"context"
	"sync"
)

// MaxCommitGroup bounds how many commits one group (one transaction) carries.
const MaxCommitGroup = 64

// Committer groups concurrent ResponseCommits into shared transactions (group commit) without a
// goroutine of its own. Up to Lanes groups are written at once (0 means 1). A caller that finds
// a lane free writes its commit at once, alone: a lone commit is never delayed. A caller that
// finds every lane busy queues; the writer of a lane, once done, takes the commits queued
// meanwhile (up to MaxCommitGroup) as the next group and hands it to the first of them to write,
// or frees the lane when none is queued. So the queue is empty whenever a lane is free.
type Committer struct {
	Lanes int

	mu      sync.Mutex
	queue   []*PendingCommit
	writing int
}

// PendingCommit is one commit of a group. The group's writer sets Err, its result.
type PendingCommit struct {
	Ctx context.Context
	P   *ResponseCommitParams
	Err error
	// wake receives nil when another caller wrote this commit, or the group this commit's
	// caller is to write (itself first).
	wake chan []*PendingCommit
}

// Run queues p and returns its result once write has written a group that carries it. write
// sets each commit's Err; it never sees an empty group.
func (c *Committer) Run(ctx context.Context, p *ResponseCommitParams, write func([]*PendingCommit)) error {
	me := &PendingCommit{Ctx: ctx, P: p, wake: make(chan []*PendingCommit, 1)}
	var group []*PendingCommit
	c.mu.Lock()
	if c.writing < max(c.Lanes, 1) {
		c.writing++
		group = []*PendingCommit{me}
	} else {
		c.queue = append(c.queue, me)
	}
	c.mu.Unlock()
	if group == nil {
		// A lane's writer either writes this commit or hands it a group to write, and a write
		// is bounded by the statements' contexts, so this wait ends.
		if group = <-me.wake; group == nil {
			return me.Err
		}
	}
	write(group)
	for _, o := range group[1:] {
		o.wake <- nil
	}
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.writing--
		c.mu.Unlock()
		return me.Err
	}
	n := min(len(c.queue), MaxCommitGroup)
	next := c.queue[:n:n]
	c.queue = c.queue[n:]
	c.mu.Unlock()
	next[0].wake <- next
	return me.Err
}

// Load reports how many groups are being written and how many commits wait for a lane.
func (c *Committer) Load() (writing, queued int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writing, len(c.queue)
}
