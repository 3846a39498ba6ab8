package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/respgate/respgate/store"
)

// groupRecorder is a write function for store.Committer that records each group it is given
// (by response id), gives each commit an error naming its own response, and, while hold is
// open, keeps every group waiting inside the write.
type groupRecorder struct {
	mu      sync.Mutex
	groups  [][]string
	writing int
	most    int // the most groups seen writing at once
	hold    chan struct{}
}

func (g *groupRecorder) write(group []*store.PendingCommit) {
	ids := make([]string, len(group))
	for i, c := range group {
		ids[i] = c.P.Response.ID
	}
	g.mu.Lock()
	g.groups = append(g.groups, ids)
	g.writing++
	g.most = max(g.most, g.writing)
	g.mu.Unlock()
	<-g.hold
	for _, c := range group {
		c.Err = errors.New("written " + c.P.Response.ID)
	}
	g.mu.Lock()
	g.writing--
	g.mu.Unlock()
}

// commitAll starts a Run for each id, each in its own goroutine, and returns the results by id
// once every Run has returned (call it after hold is closed, or it blocks).
func commitAll(c *store.Committer, g *groupRecorder, ids []string) func() map[string]error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	got := map[string]error{}
	for _, id := range ids {
		wg.Go(func() {
			err := c.Run(context.Background(), &store.ResponseCommitParams{Response: store.Response{ID: id}}, g.write)
			mu.Lock()
			got[id] = err
			mu.Unlock()
		})
	}
	return func() map[string]error {
		wg.Wait()
		return got
	}
}

func checkOwnResults(t *testing.T, got map[string]error) {
	t.Helper()
	for id, err := range got {
		if err == nil || err.Error() != "written "+id {
			t.Errorf("Run of %s returned %v, want its own result", id, err)
		}
	}
}

func TestCommitterWritesALoneCommitAtOnceAndGroupsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &groupRecorder{hold: make(chan struct{})}
		c := &store.Committer{Lanes: 1}
		first := commitAll(c, g, []string{"r0"})
		synctest.Wait() // r0 writes alone, held in its write
		if len(g.groups) != 1 || !slices.Equal(g.groups[0], []string{"r0"}) {
			t.Fatalf("groups while r0 writes: %v, want [[r0]]", g.groups)
		}
		var queued []string
		for i := range 5 {
			queued = append(queued, fmt.Sprintf("r%d", i+1))
		}
		rest := commitAll(c, g, queued)
		synctest.Wait() // the five queue behind the busy lane
		if len(g.groups) != 1 {
			t.Fatalf("a commit was written while the only lane was busy: %v", g.groups)
		}
		close(g.hold)
		checkOwnResults(t, first())
		checkOwnResults(t, rest())
		if len(g.groups) != 2 || len(g.groups[1]) != 5 {
			t.Fatalf("groups %v, want [r0] then the five queued ones in one group", g.groups)
		}
		second := slices.Clone(g.groups[1])
		slices.Sort(second)
		if !slices.Equal(second, queued) {
			t.Errorf("second group %v, want %v", g.groups[1], queued)
		}
	})
}

func TestCommitterWritesUpToLanesGroupsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &groupRecorder{hold: make(chan struct{})}
		c := &store.Committer{Lanes: 2}
		var waits []func() map[string]error
		for i := range 6 {
			waits = append(waits, commitAll(c, g, []string{fmt.Sprintf("r%d", i)}))
			synctest.Wait()
		}
		// Two lone commits write at once; the other four queue for the next free lane.
		if len(g.groups) != 2 || g.most != 2 {
			t.Fatalf("with 2 lanes busy: groups %v, %d writing at once; want two lone groups", g.groups, g.most)
		}
		close(g.hold)
		for _, w := range waits {
			checkOwnResults(t, w())
		}
		if g.most > 2 {
			t.Errorf("%d groups wrote at once, want at most 2", g.most)
		}
		n := 0
		for _, grp := range g.groups {
			n += len(grp)
		}
		if n != 6 || len(g.groups) > 4 {
			t.Errorf("groups %v: want the six commits each written once, the queued four in at most two groups", g.groups)
		}
	})
}

func TestCommitterBoundsAGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &groupRecorder{hold: make(chan struct{})}
		c := &store.Committer{Lanes: 1}
		first := commitAll(c, g, []string{"r0"})
		synctest.Wait()
		var ids []string
		for i := range store.MaxCommitGroup + 3 {
			ids = append(ids, fmt.Sprintf("q%d", i))
		}
		rest := commitAll(c, g, ids)
		synctest.Wait()
		close(g.hold)
		checkOwnResults(t, first())
		checkOwnResults(t, rest())
		sizes := []int{}
		for _, grp := range g.groups {
			sizes = append(sizes, len(grp))
		}
		if !slices.Equal(sizes, []int{1, store.MaxCommitGroup, 3}) {
			t.Errorf("group sizes %v, want [1 %d 3]", sizes, store.MaxCommitGroup)
		}
	})
}
