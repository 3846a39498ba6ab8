//go:build !unix

package accumulator

func cpuNanos() int64 { return 0 }
