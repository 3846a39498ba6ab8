package background

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
)

// What Start asks River for: cfg.Workers turn slots on the default queue, cfg.Timeout per run,
// a stuck job rescued 5 minutes after any run would have ended, the poll interval as set, and the
// housekeeping job only when there is housekeeping to run.
func TestRiverConfigCarriesTheLimitsAndTheHousekeepingJob(t *testing.T) {
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Workers: 3, Timeout: 7 * time.Minute, FetchPollInterval: 250 * time.Millisecond,
		Turn: func(context.Context, string, string) error { return nil }}
	cfg.defaults()
	rc, err := riverConfig(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	if q := rc.Queues[river.QueueDefault]; q.MaxWorkers != 3 || len(rc.Queues) != 1 {
		t.Fatalf("queues %+v, want the default queue with 3 workers", rc.Queues)
	}
	if rc.JobTimeout != 7*time.Minute || rc.RescueStuckJobsAfter != 12*time.Minute {
		t.Fatalf("job timeout %v, rescue after %v; want 7m0s and 12m0s", rc.JobTimeout, rc.RescueStuckJobsAfter)
	}
	if rc.FetchPollInterval != 250*time.Millisecond || rc.Logger != cfg.Logger || rc.Workers == nil {
		t.Fatalf("poll %v, logger %p (want %p), workers %v", rc.FetchPollInterval, rc.Logger, cfg.Logger, rc.Workers)
	}
	if len(rc.PeriodicJobs) != 0 {
		t.Fatalf("%d periodic jobs without housekeeping", len(rc.PeriodicJobs))
	}
	cfg.Housekeeping = func(context.Context) {}
	if rc, err = riverConfig(cfg, m); err != nil || len(rc.PeriodicJobs) != 1 {
		t.Fatalf("with housekeeping: %v, %d periodic jobs, want 1", err, len(rc.PeriodicJobs))
	}
}
