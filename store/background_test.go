package store

import (
	"errors"
	"testing"

	"github.com/riverqueue/river/rivertype"

	"github.com/respgate/respgate/wire"
)

func TestCancelDecisionEndsOnlyAQueuedResponseRiverWillNotRun(t *testing.T) {
	for _, c := range []struct {
		status wire.Status
		state  rivertype.JobState
		want   CancelOutcome
	}{
		{wire.StatusCompleted, rivertype.JobStateCompleted, CancelFinished},
		{wire.StatusCancelled, rivertype.JobStateCancelled, CancelFinished},
		{wire.StatusFailed, rivertype.JobStateRunning, CancelFinished},
		{wire.StatusQueued, rivertype.JobStateAvailable, CancelQueued},
		{wire.StatusQueued, rivertype.JobStateCancelled, CancelQueued},
		// River fetched it but the worker has not claimed the response yet: the run's context
		// is cancelled, and the worker stores the end.
		{wire.StatusQueued, rivertype.JobStateRunning, CancelRunning},
		{wire.StatusInProgress, rivertype.JobStateRunning, CancelRunning},
		{wire.StatusInProgress, rivertype.JobStateCancelled, CancelRunning},
	} {
		if got := CancelDecision(c.status, c.state); got != c.want {
			t.Errorf("response %s, job %s: %d, want %d", c.status, c.state, got, c.want)
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
