package loadgen

import (
	"os"
	"strings"
	"testing"
	"time"
)

// ProcsCPU finds processes by command name (here this test's own process) and CPUSince adds up
// what each used between two readings, a process that appeared in between counting from zero.
func TestProcsCPUFindsProcessesByNameAndCPUSinceAddsTheirTime(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	got := ProcsCPU(strings.TrimSpace(string(comm)))
	if _, ok := got[os.Getpid()]; !ok {
		t.Fatalf("ProcsCPU(%q) = %v, does not hold this process %d", comm, got, os.Getpid())
	}
	if len(ProcsCPU("no-such-process-name")) != 0 {
		t.Fatal("ProcsCPU found processes of a name none has")
	}
	before := map[int]time.Duration{1: 10 * time.Millisecond, 2: 5 * time.Millisecond, 3: time.Second}
	now := map[int]time.Duration{1: 25 * time.Millisecond, 2: 5 * time.Millisecond, 4: 7 * time.Millisecond}
	if d := CPUSince(before, now); d != 22*time.Millisecond {
		t.Fatalf("CPUSince = %v, want 15ms + 0 + 7ms (pid 3 ended, pid 4 is new)", d)
	}
}
