// Package pgtest gives tests a real, isolated Postgres: each call to DSN creates a fresh schema and
// drops it when the test ends (docs/style.md, "Store contract and conformance"). It finds a server once per
// test binary, in this order:
//
//  1. $TEST_DATABASE_URL, if set (and nothing else: a broken URL fails instead of falling back);
//  2. postgres://postgres@127.0.0.1:5432/test?sslmode=disable, if it answers;
//  3. a throwaway cluster started from the local PostgreSQL binaries (initdb and pg_ctl under
//     /usr/lib/postgresql/*/bin or on $PATH) in a temporary directory on a free port, run as the
//     "postgres" OS user when the tests run as root, and stopped by Main after the tests.
//
// Setting RESPGATE_PGTEST_FORCE_LOCAL=1 skips 1 and 2, to exercise the throwaway path. When no
// server can be had, the test fails with a message saying how to fix that; it never skips.
//
// It is for tests only and must not be imported by production code.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// Environment variables that steer the server choice.
const (
	// EnvURL names a server to use; when set it is the only candidate.
	EnvURL = "TEST_DATABASE_URL"
	// EnvForceLocal, when "1", always starts a throwaway cluster (to test that path).
	EnvForceLocal = "RESPGATE_PGTEST_FORCE_LOCAL"
	// DefaultURL is tried when EnvURL is unset.
	DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

const howToFix = "fix: set " + EnvURL + " to a Postgres URL whose user may CREATE SCHEMA " +
	"(e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable), or run a server there, " +
	"or install the PostgreSQL server binaries (apt-get install postgresql) so a throwaway cluster can be started"

var (
	once       sync.Once
	baseDSN    string
	admin      *pgxpool.Pool
	local      *cluster
	resolveErr error
	mainActive atomic.Bool
)

// Main runs the tests of a package that uses DSN and then cleans up: it closes the harness's
// connections, stops a throwaway cluster if one was started, and checks for leaked goroutines
// (goleak), failing the run if any remain. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// A package that may need the throwaway cluster must use Main, or DSN fails rather than leave a
// server running.
func Main(m *testing.M) {
	mainActive.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// DSN returns a connection string for a new, empty schema of its own (as the connection's
// search_path), created now and dropped with everything in it when t ends. The first call in a
// process finds a server (see the package doc); if none works, t fails with how to fix it.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(resolve)
	if resolveErr != nil {
		t.Fatalf("pgtest: no Postgres for tests: %v", resolveErr)
	}
	schema := "t_" + randomHex(8)
	ident := pgx.Identifier{schema}.Sanitize()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	dsn, err := withSearchPath(baseDSN, schema)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// withSearchPath adds the search_path runtime parameter to a URL or key=value DSN.
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse dsn: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// Our schema names need no quoting: t_ and hex digits.
	return dsn + " search_path=" + schema, nil
}

func resolve() {
	var tried []string
	if os.Getenv(EnvForceLocal) != "1" {
		if env := os.Getenv(EnvURL); env != "" {
			pool, err := connect(env)
			if err != nil {
				resolveErr = fmt.Errorf("%s=%s does not work: %w; %s", EnvURL, redact(env), err, howToFix)
				return
			}
			baseDSN, admin = env, pool
			return
		}
		pool, err := connect(DefaultURL)
		if err == nil {
			baseDSN, admin = DefaultURL, pool
			return
		}
		tried = append(tried, fmt.Sprintf("%s unset; %s: %v", EnvURL, DefaultURL, err))
	}
	if !mainActive.Load() {
		resolveErr = fmt.Errorf("%s; a throwaway cluster needs pgtest.Main in the package's TestMain "+
			"(func TestMain(m *testing.M) { pgtest.Main(m) }) so that it is stopped; %s", strings.Join(tried, "; "), howToFix)
		return
	}
	c, err := startCluster()
	if err != nil {
		tried = append(tried, "throwaway cluster: "+err.Error())
		resolveErr = fmt.Errorf("%s; %s", strings.Join(tried, "; "), howToFix)
		return
	}
	local = c
	pool, err := connect(c.dsn)
	if err != nil {
		resolveErr = fmt.Errorf("throwaway cluster started but does not answer: %w; log: %s", err, c.logTail())
		return
	}
	baseDSN, admin = c.dsn, pool
}

func connect(dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping: %w", err)
	}
	return pool, nil
}

func shutdown() error {
	if admin != nil {
		admin.Close()
	}
	if local != nil {
		return local.stop()
	}
	return nil
}

// redact hides a password in a URL DSN.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(key=value DSN)"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// cluster is a throwaway Postgres in a temporary directory.
type cluster struct {
	bin    string // directory of initdb, pg_ctl
	dir    string
	runAs  string // OS user to run the binaries as; empty: ourselves
	dsn    string
	logDir string
}

func startCluster() (*cluster, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "respgate-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("make temp dir: %w", err)
	}
	c := &cluster{bin: bin, dir: dir, logDir: dir}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root.
		c.runAs = "postgres"
		u, err := user.Lookup(c.runAs)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs the OS user %q: %w", c.runAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("chown temp dir: %w", err)
		}
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := c.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", port, dir)
	if err := c.run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		_ = c.stop()
		return nil, err
	}
	c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	c.startWatchdog()
	return c, nil
}

// startWatchdog starts a small shell process, in a session of its own (so Ctrl-C does not reach
// it), that stops the cluster and removes its directory once this test process is gone: Main
// does that after the tests, but not when a test panics or the binary is killed.
func (c *cluster) startWatchdog() {
	data := filepath.Join(c.dir, "data")
	stop := shellQuote(filepath.Join(c.bin, "pg_ctl")) + " -D " + shellQuote(data) + " -m immediate -w stop"
	if c.runAs != "" {
		if runuser, err := exec.LookPath("runuser"); err == nil {
			stop = shellQuote(runuser) + " -u " + shellQuote(c.runAs) + " -- " + stop
		}
	}
	script := fmt.Sprintf("while kill -0 %d 2>/dev/null; do sleep 1; done; %s >/dev/null 2>&1; rm -rf %s",
		os.Getpid(), stop, shellQuote(c.dir))
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err == nil {
		// Never waited for: it outlives us by design. Release frees its process handle.
		_ = cmd.Process.Release()
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (c *cluster) stop() error {
	var err error
	data := filepath.Join(c.dir, "data")
	if isFile(filepath.Join(data, "postmaster.pid")) {
		err = c.run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
	}
	if rmErr := os.RemoveAll(c.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("remove %s: %w", c.dir, rmErr)
	}
	if err != nil {
		return fmt.Errorf("stop throwaway cluster: %w", err)
	}
	return nil
}

// run runs one of the PostgreSQL binaries, as c.runAs when set. Output goes to a file, not a pipe:
// the server pg_ctl starts must not hold our pipe open.
func (c *cluster) run(name string, args ...string) error {
	prog := filepath.Join(c.bin, name)
	if c.runAs != "" {
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			return fmt.Errorf("find runuser (needed to run %s as %s): %w", name, c.runAs, err)
		}
		args = append([]string{"-u", c.runAs, "--", prog}, args...)
		prog = runuser
	}
	logPath := filepath.Join(c.logDir, name+".out")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", logPath, err)
	}
	defer out.Close()
	cmd := exec.Command(prog, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = c.dir
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(tail(string(b), 2000)))
	}
	return nil
}

func (c *cluster) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	return tail(string(b), 2000)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// findBinaries returns the directory holding initdb and pg_ctl: the newest
// /usr/lib/postgresql/<major>/bin, else wherever $PATH has initdb.
func findBinaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return major(b) - major(a) })
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isFile(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("no initdb/pg_ctl under /usr/lib/postgresql/*/bin or on $PATH")
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
