package engine

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/respgate/respgate/internal/logtest"

	"github.com/respgate/respgate/wire"
)

// A commit the access line cannot carry logs its own line: one after the line was written, and
// a second one of the same request (the line carries one response).
func TestACommitTheAccessLineCannotCarryIsLoggedOnItsOwn(t *testing.T) {
	logs := &logtest.Records{}
	s := &Engine{log: slog.New(logs)}
	ctx := WithStoredLog(t.Context(), &StoredLog{})
	s.logStored(ctx, "resp_1", wire.StatusCompleted, 1, 2, 3)
	s.logStored(ctx, "resp_2", wire.StatusFailed, 4, 5, 6)
	late := &StoredLog{}
	if attrs := late.Take(); attrs != nil {
		t.Fatalf("an unused access line carries %v", attrs)
	}
	s.logStored(WithStoredLog(t.Context(), late), "resp_3", wire.StatusCancelled, 7, 8, 9)
	s.logStored(t.Context(), "resp_4", wire.StatusIncomplete, 0, 1, 0) // a background worker's
	want := []string{
		"INFO response stored response_id=resp_2 response_status=failed input_items=4 output_items=5 events=6",
		"INFO response stored response_id=resp_3 response_status=cancelled input_items=7 output_items=8 events=9",
		"INFO response stored response_id=resp_4 response_status=incomplete input_items=0 output_items=1 events=0",
	}
	if got := logs.Snapshot(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
