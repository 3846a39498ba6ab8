//go:build unix

package rehydrate

import "syscall"

// cpuNanos is the CPU time (user + system) this process has used. Benchmarks report it per item
// because wall time on a shared machine measures the neighbours too.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
