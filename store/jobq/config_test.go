package jobq

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
)

// Start's River configuration: the client's schema; without a notifier a 100 ms poll unless one
// is set; a 5 ms fetch cooldown (FetchCooldown), never longer than the poll, unless one is set;
// the caller's config is left as it was.
func TestWorkerConfigPollsOftenWithoutANotifier(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name                 string
		poll, cooldown       time.Duration
		listener             bool
		wantPoll, wantCooldn time.Duration
	}{
		{"no notifier, nothing set", 0, 0, false, 100 * ms, 5 * ms},
		{"a notifier, nothing set: River's poll, our cooldown", 0, 0, true, 0, 5 * ms},
		{"no notifier, a poll set: kept", 50 * ms, 0, false, 50 * ms, 5 * ms},
		{"a poll shorter than the cooldown bounds it", 2 * ms, 0, true, 2 * ms, 2 * ms},
		{"a notifier and a slow poll", 2 * time.Second, 0, true, 2 * time.Second, 5 * ms},
		{"a cooldown set is kept", 50 * ms, 10 * ms, false, 50 * ms, 10 * ms},
		{"a negative poll without a notifier is replaced", -ms, 0, false, 100 * ms, 5 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &river.Config{FetchPollInterval: tc.poll, FetchCooldown: tc.cooldown}
			c := workerConfig(in, "river_s", tc.listener)
			if c.Schema != "river_s" || c.FetchPollInterval != tc.wantPoll || c.FetchCooldown != tc.wantCooldn {
				t.Fatalf("schema %q poll %v cooldown %v, want river_s %v %v", c.Schema, c.FetchPollInterval, c.FetchCooldown, tc.wantPoll, tc.wantCooldn)
			}
			if in.Schema != "" || in.FetchPollInterval != tc.poll || in.FetchCooldown != tc.cooldown {
				t.Fatalf("the caller's config changed: %+v", in)
			}
		})
	}
}
