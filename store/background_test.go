package store

import (
	"errors"
	"testing"

	"github.com/respgate/respgate/wire"
)

func TestCancelDecisionEndsEveryQueuedResponseAtOnce(t *testing.T) {
	for _, c := range []struct {
		status wire.Status
		want   CancelOutcome
	}{
		{wire.StatusCompleted, CancelFinished},
		{wire.StatusCancelled, CancelFinished},
		{wire.StatusFailed, CancelFinished},
		{wire.StatusIncomplete, CancelFinished},
		// Queued, whether or not River has handed its job to a worker (which may have died):
		// nothing reached upstream, and the worker's claim will find it ended (issue 38 item 2).
		{wire.StatusQueued, CancelQueued},
		{wire.StatusInProgress, CancelRunning},
	} {
		if got := CancelDecision(c.status); got != c.want {
			t.Errorf("response %s: %d, want %d", c.status, got, c.want)
		}
	}
}

func TestEnqueueBoundsAreInclusiveLimitsAndZeroIsUnbounded(t *testing.T) {
	p := &ResponseEnqueueBackgroundParams{MaxPerTenant: 2, MaxQueued: 10}
	for _, c := range []struct {
		tenant, queued int
		want           error
	}{
		{0, 0, nil}, {1, 9, nil}, {2, 0, ErrTenantBusy}, {0, 10, ErrQueueFull}, {5, 50, ErrTenantBusy},
	} {
		if got := p.Bounds(c.tenant, c.queued); !errors.Is(got, c.want) {
			t.Errorf("tenant %d, queued %d: %v, want %v", c.tenant, c.queued, got, c.want)
		}
	}
	if err := (&ResponseEnqueueBackgroundParams{}).Bounds(1_000_000, 1_000_000); err != nil {
		t.Errorf("no bounds: %v", err)
	}
}
