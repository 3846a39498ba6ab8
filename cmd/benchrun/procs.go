package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/respgate/respgate/server"
)

// child is a helper or respgate process started by benchrun on a loopback port. Its stdout and
// stderr go to a log file in the run's log folder.
type child struct {
	name string
	cmd  *exec.Cmd
	addr string // host:port
	// debugAddr serves server.DebugHandler (/debug/pprof/, /debug/vars): respgate's
	// --debug-listen, or addr for benchrun's own proxy.
	debugAddr string
	log       string
	done      chan struct{}
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

// freeRun returns n loopback addresses on consecutive ports, all free right now (vllm-sim
// --instances listens on consecutive ports from its --listen address).
func freeRun(n int) ([]string, error) {
	for range 50 {
		first, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, port, err := net.SplitHostPort(first)
		if err != nil {
			return nil, err
		}
		base, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		var addrs []string
		var lns []net.Listener
		for i := range n {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i))
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				break
			}
			lns = append(lns, ln)
			addrs = append(addrs, addr)
		}
		for _, ln := range lns {
			_ = ln.Close()
		}
		if len(addrs) == n {
			return addrs, nil
		}
	}
	return nil, fmt.Errorf("no %d consecutive free ports found", n)
}

// startChild runs bin with args (ADDR and DEBUGADDR in args are replaced by free loopback
// addresses, the listener's and the debug listener's) and waits until GET readyPath answers 200.
func startChild(ctx context.Context, logDir, name, bin string, args []string, readyPath string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return startChildAt(ctx, logDir, name, bin, args, readyPath, addr)
}

// startChildAt is startChild on a given listener address (a restart on the port a killed
// child had, as the fleet scenario's simulator instance comes back).
func startChildAt(ctx context.Context, logDir, name, bin string, args []string, readyPath, addr string) (*child, error) {
	var err error
	debugAddr := addr
	full := make([]string, len(args))
	for i, a := range args {
		switch a {
		case "ADDR":
			a = addr
		case "DEBUGADDR":
			if debugAddr, err = freeAddr(); err != nil {
				return nil, err
			}
			a = debugAddr
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
	c := &child{name: name, cmd: cmd, addr: addr, debugAddr: debugAddr, log: logPath, done: make(chan struct{})}
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

// kill ends the child at once (SIGKILL) and waits for it: a crash, not a shutdown.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
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

// memstats reads a proxy or respgate child's runtime counters from its debug listener's
// /debug/vars (server.DebugHandler: runtime.MemStats, exact), after garbage collections when gc
// is set (pprof's heap profile with gc=1 runs one), so heap_live_bytes is what is really live.
func (c *child) memstats(ctx context.Context, gc ...bool) (server.DebugVars, error) {
	var v server.DebugVars
	if len(gc) > 0 && gc[0] {
		// Two collections: an object only a sync.Pool holds survives the first (in the pool's
		// victim cache), so after one, buffers the idle process keeps pooled count as live and
		// cancel the same buffers held by open streams.
		for range 2 {
			if err := get(ctx, "http://"+c.debugAddr+"/debug/pprof/heap?gc=1", io.Discard); err != nil {
				return v, err
			}
		}
	}
	var body bytes.Buffer
	if err := get(ctx, "http://"+c.debugAddr+"/debug/vars", &body); err != nil {
		return v, err
	}
	if err := json.Unmarshal(body.Bytes(), &v); err != nil {
		return v, fmt.Errorf("%s /debug/vars: %w", c.name, err)
	}
	return v, nil
}

// get copies url's body to dst; a status other than 200 is an error.
func get(ctx context.Context, url string, dst io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	_, err = io.Copy(dst, resp.Body)
	return err
}
