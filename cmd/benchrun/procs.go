package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// child is a helper or respgate process started by benchrun on a loopback port. Its stdout and
// stderr go to a log file in the run's log folder.
type child struct {
	name string
	cmd  *exec.Cmd
	addr string // host:port
	log  string
	done chan struct{}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// baseURL is the child's /v1 base URL.
func (c *child) baseURL() string { return "http://" + c.addr + "/v1" }

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startChild runs bin with args (ADDR in args is replaced by a free loopback address) and waits
// until GET readyPath answers 200.
func startChild(ctx context.Context, logDir, name, bin string, args []string, readyPath string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	full := make([]string, len(args))
	for i, a := range args {
		if a == "ADDR" {
			a = addr
		}
		full[i] = a
	}
	logPath := filepath.Join(logDir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, full...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive benchrun
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, addr: addr, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); lf.Close(); close(c.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-c.done:
			return nil, fmt.Errorf("%s exited during start; see %s", name, logPath)
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		default:
		}
		resp, err := http.Get("http://" + addr + readyPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, nil
			}
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("%s not ready after 60s; see %s", name, logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the child: SIGTERM, then SIGKILL after 10 s.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// alive reports whether the child still runs.
func (c *child) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// memstats reads a proxy or gateway child's allocation counters (after a garbage collection
// when gc is set, so the heap figures are the live heap).
func (c *child) memstats(gc ...bool) (memStats, error) {
	var m memStats
	u := "http://" + c.addr + memstatsPath
	if len(gc) > 0 && gc[0] {
		u += "?gc=1"
	}
	resp, err := http.Get(u)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&m)
	return m, err
}
