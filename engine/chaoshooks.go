//go:build chaoshooks

package engine

import (
	"context"
	"log/slog"
	"os"
	"time"
)

// chaosHoldLimit bounds a hold whose run is never cancelled or killed: the run then goes on.
const chaosHoldLimit = time.Minute

// A binary built with -tags chaoshooks (only integration/chaos builds one) holds every
// background run at the stage named by RESPGATE_CHAOS_HOLD ("fetched" or "claimed"): it logs
// "chaos hold" with the stage and the response id, so that the harness knows the run is in its
// window, and waits, then goes on as it would have. A run held after the fetch is frozen (as by
// SIGSTOP: only a kill -9 or chaosHoldLimit ends the hold, not its context, so a requeue's
// cancel of its job does not wake it); a run held after its claim waits until its context ends
// (a cancel, shutdown) or chaosHoldLimit passes.
func init() {
	stage := os.Getenv("RESPGATE_CHAOS_HOLD")
	if stage != holdFetched && stage != holdClaimed {
		return
	}
	chaosHold = func(ctx context.Context, log *slog.Logger, at, id string) {
		if at != stage {
			return
		}
		log.Warn("chaos hold", "stage", at, "response_id", id)
		t := time.NewTimer(chaosHoldLimit)
		defer t.Stop()
		if at == holdFetched {
			<-t.C
			return
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
