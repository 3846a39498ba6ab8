//go:build unix

package accumulator

import "syscall"

// cpuNanos is the process's user+system CPU time: benchmarks report it next to wall time because
// wall time is meaningless on a loaded machine.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
