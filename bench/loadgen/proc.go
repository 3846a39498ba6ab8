package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTick is the unit of utime/stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// ProcStat is a snapshot of a process's resource use read from /proc.
type ProcStat struct {
	PID int `json:"pid"`
	// CPU is the CPU time the process used so far: the sum of its threads' run time from
	// /proc/<pid>/task/*/schedstat (nanoseconds) when available, else utime+stime from
	// /proc/<pid>/stat (10 ms ticks). Threads that already exited are not in the schedstat sum,
	// but their time is in CPUTicks; Go processes rarely end threads.
	CPU time.Duration `json:"cpu_ns"`
	// CPUTicks is utime+stime from /proc/<pid>/stat.
	CPUTicks time.Duration `json:"cpu_ticks_ns"`
	// RSS and HWM are VmRSS and VmHWM (peak RSS) from /proc/<pid>/status, in bytes.
	RSS     int64 `json:"rss_bytes"`
	HWM     int64 `json:"hwm_bytes"`
	Threads int   `json:"threads"`
}

// ReadProc reads pid's CPU time and memory from /proc.
func ReadProc(pid int) (ProcStat, error) {
	st := ProcStat{PID: pid}
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return st, fmt.Errorf("read proc stat: %w", err)
	}
	// The command name (field 2) may hold spaces; fields are counted after its closing ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, fmt.Errorf("read proc stat: malformed %s/stat", dir)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return st, fmt.Errorf("read proc stat: short %s/stat", dir)
	}
	ut, _ := strconv.ParseInt(string(f[11]), 10, 64)
	stt, _ := strconv.ParseInt(string(f[12]), 10, 64)
	st.CPUTicks = time.Duration(ut+stt) * clockTick
	st.CPU = st.CPUTicks
	if ns, n, ok := schedNanos(dir); ok {
		st.CPU, st.Threads = ns, n
	}
	b, err = os.ReadFile(dir + "/status")
	if err != nil {
		return st, fmt.Errorf("read proc status: %w", err)
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			st.RSS = kib(line)
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			st.HWM = kib(line)
		case bytes.HasPrefix(line, []byte("Threads:")) && st.Threads == 0:
			st.Threads = int(kib(line) / 1024)
		}
	}
	return st, nil
}

// kib parses "Name:   123 kB" into bytes.
func kib(line []byte) int64 {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return n * 1024
}

// schedNanos sums the first field (time spent on the CPU, ns) of every thread's schedstat.
func schedNanos(dir string) (time.Duration, int, bool) {
	tasks, err := filepath.Glob(dir + "/task/*/schedstat")
	if err != nil || len(tasks) == 0 {
		return 0, 0, false
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			return 0, 0, false
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, 0, false
		}
		sum += n
	}
	return time.Duration(sum), len(tasks), sum > 0
}

// Sampler polls the RSS of some processes in the background and keeps each one's peak.
type Sampler struct {
	mu   sync.Mutex
	peak map[int]int64
	stop chan struct{}
	done chan struct{}
}

// StartSampler polls pids every interval until Stop.
func StartSampler(pids []int, every time.Duration) *Sampler {
	s := &Sampler{peak: make(map[int]int64, len(pids)), stop: make(chan struct{}), done: make(chan struct{})}
	poll := func() {
		for _, p := range pids {
			if st, err := ReadProc(p); err == nil {
				s.mu.Lock()
				s.peak[p] = max(s.peak[p], st.RSS)
				s.mu.Unlock()
			}
		}
	}
	poll()
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				poll()
				return
			case <-t.C:
				poll()
			}
		}
	}()
	return s
}

// Stop ends polling and returns the peak RSS (bytes) seen per pid.
func (s *Sampler) Stop() map[int]int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// ProcsCPU returns the CPU time used so far by every process whose command name (/proc/PID/comm)
// is name, by pid: for example the Postgres server's backends, which are separate processes.
// Processes that end between two calls take their time with them; a database's pooled
// connections do not end during a run.
func ProcsCPU(name string) map[int]time.Duration {
	out := map[int]time.Duration{}
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		b, err := os.ReadFile(c)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(c)))
		if err != nil {
			continue
		}
		if st, err := ReadProc(pid); err == nil {
			out[pid] = st.CPU
		}
	}
	return out
}

// CPUSince is the CPU time the processes of now used since before (a process new in now counts
// from zero).
func CPUSince(before, now map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range now {
		d += t - before[pid]
	}
	return d
}
