package deploy

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/pgtest"
)

// TestMain uses pgtest.Main: it stops a throwaway Postgres if one was started and runs goleak.
func TestMain(m *testing.M) { pgtest.Main(m) }

// repoRoot is the module root, relative to this package.
const repoRoot = ".."

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ---- .dockerignore and the build context ----

type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
	text   string
}

// dockerignoreRules parses .dockerignore with Docker's rules: one pattern per line, # comments,
// ! exceptions, * and ? within a path segment, ** across segments; the last matching rule wins and a
// rule matching a directory matches everything in it.
func dockerignoreRules(t *testing.T) []ignoreRule {
	t.Helper()
	var rules []ignoreRule
	for _, line := range strings.Split(readRepoFile(t, ".dockerignore"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{text: line}
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, line[1:]
		}
		line = strings.Trim(filepath.ToSlash(filepath.Clean(line)), "/")
		var b strings.Builder
		b.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				b.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				b.WriteString(".*")
				i++
			case c == '*':
				b.WriteString("[^/]*")
			case c == '?':
				b.WriteString("[^/]")
			case c == '[' || c == ']' || c == '-' || c == '^':
				b.WriteByte(c) // character classes pass through
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		b.WriteString("$")
		r.re = regexp.MustCompile(b.String())
		rules = append(rules, r)
	}
	return rules
}

// dockerignored reports whether rel (slash-separated, relative to the context) is excluded.
func dockerignored(rules []ignoreRule, rel string) bool {
	excluded := false
	for _, r := range rules {
		for p := rel; ; {
			if r.re.MatchString(p) {
				excluded = !r.negate
				break
			}
			i := strings.LastIndex(p, "/")
			if i < 0 {
				break
			}
			p = p[:i]
		}
	}
	return excluded
}

// contextCopy copies the repository, minus what .dockerignore excludes, to a fresh directory: the
// Docker build context, and what a fresh checkout holds (.dockerignore excludes only VCS data,
// build output, local state and secrets).
func contextCopy(t *testing.T) string {
	t.Helper()
	rules := dockerignoreRules(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "src")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return os.MkdirAll(dst, 0o755)
		}
		if dockerignored(rules, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm())
		}
		return nil // sockets, symlinks: not part of a Go checkout
	})
	if err != nil {
		t.Fatalf("copy build context: %v", err)
	}
	return dst
}

// ---- the Dockerfile ----

type dfInstr struct {
	line int
	cmd  string // upper case
	args string
}

type dfStage struct {
	name, base string
	instrs     []dfInstr
}

type dockerfile struct {
	args   map[string]string // global ARG defaults
	stages []*dfStage
}

func parseDockerfile(t *testing.T, src string) *dockerfile {
	t.Helper()
	df := &dockerfile{args: map[string]string{}}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			line = strings.TrimSuffix(line, `\`) + " " + next
		}
		if strings.Contains(line, "<<") {
			t.Fatalf("Dockerfile:%d: heredocs are not supported by this test", start)
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := dfInstr{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			var st dfStage
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			} else if len(f) != 1 {
				t.Fatalf("Dockerfile:%d: FROM %q", start, in.args)
			}
			st.base = f[0]
			df.stages = append(df.stages, &st)
			continue
		}
		if len(df.stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile:%d: %s before FROM", start, in.cmd)
			}
			k, v, _ := strings.Cut(in.args, "=")
			df.args[k] = v
			continue
		}
		st := df.stages[len(df.stages)-1]
		st.instrs = append(st.instrs, in)
	}
	return df
}

func (df *dockerfile) stage(t *testing.T, name string) *dfStage {
	t.Helper()
	for _, s := range df.stages {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("Dockerfile has no stage %q", name)
	return nil
}

// expand replaces ${NAME} and $NAME with the global ARG defaults.
func (df *dockerfile) expand(s string) string {
	return os.Expand(s, func(k string) string { return df.args[k] })
}

func (s *dfStage) all(cmd string) []dfInstr {
	var out []dfInstr
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// execForm parses a JSON exec-form argument list (["a", "b"]), as Docker requires for ENTRYPOINT,
// CMD and HEALTHCHECK CMD here (the images have no shell).
func execForm(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil || len(out) == 0 {
		t.Fatalf("%q is not an exec-form (JSON array of strings) command: %v", s, err)
	}
	return out
}

// image is one final Dockerfile target, its files mapped to the binaries built on this machine.
type image struct {
	name        string
	files       map[string]string // path in the image → local path
	dirs        map[string]string
	entrypoint  []string
	cmd         []string
	env         map[string]string
	user        string
	workdir     string
	expose      []string
	healthcheck []string // the CMD's exec form
	healthOpts  string
}

// builtImages runs the Dockerfile's build stage the way Docker would (its RUN commands, in a copy of
// the build context .dockerignore leaves, for this machine's GOOS/GOARCH) and maps each final
// target's files to the outputs. `go mod download` is not run: it only warms Docker's module cache
// and would need the network; `go build` fails just the same if a module is missing.
func builtImages(t *testing.T) (*dockerfile, map[string]*image) {
	t.Helper()
	df := parseDockerfile(t, readRepoFile(t, "Dockerfile"))
	build := df.stage(t, "build")
	ctxDir := contextCopy(t)
	out := filepath.Join(t.TempDir(), "out")
	outRE := regexp.MustCompile(`(^|[\s=])/out(/|\s|$)`)
	for _, run := range build.all("RUN") {
		f := strings.Fields(run.args)
		for len(f) > 0 && strings.HasPrefix(f[0], "--mount=") {
			f = f[1:]
		}
		script := strings.Join(f, " ")
		if script == "go mod download" {
			continue
		}
		script = outRE.ReplaceAllString(script, "${1}"+out+"${2}")
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = ctxDir
		cmd.Env = append(cleanEnv(), "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH, "GOTOOLCHAIN=local")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("Dockerfile:%d: RUN failed: %v\n%s", run.line, err, b)
		}
	}
	images := map[string]*image{}
	for _, st := range df.stages {
		if st.name == "build" {
			continue
		}
		img := &image{name: st.name, files: map[string]string{}, dirs: map[string]string{}, env: map[string]string{}}
		for _, in := range st.instrs {
			switch in.cmd {
			case "COPY":
				f := strings.Fields(in.args)
				from := ""
				for len(f) > 0 && strings.HasPrefix(f[0], "--") {
					if v, ok := strings.CutPrefix(f[0], "--from="); ok {
						from = v
					}
					f = f[1:]
				}
				if from != "build" || len(f) < 2 {
					t.Fatalf("Dockerfile:%d: COPY must copy from the build stage", in.line)
				}
				dest := f[len(f)-1]
				for _, src := range f[:len(f)-1] {
					local := filepath.Join(out, strings.TrimPrefix(src, "/out/"))
					info, err := os.Stat(local)
					if err != nil {
						t.Fatalf("Dockerfile:%d: COPY %s: the build stage did not produce it: %v", in.line, src, err)
					}
					target := dest
					if strings.HasSuffix(dest, "/") {
						target = dest + filepath.Base(src)
					}
					if info.IsDir() {
						img.dirs[target] = local
					} else {
						img.files[target] = local
					}
				}
			case "ENTRYPOINT":
				img.entrypoint = execForm(t, in.args)
			case "CMD":
				img.cmd = execForm(t, in.args)
			case "ENV":
				k, v, ok := strings.Cut(in.args, "=")
				if !ok || strings.ContainsAny(k, " ") {
					t.Fatalf("Dockerfile:%d: write ENV as KEY=value", in.line)
				}
				img.env[k] = v
			case "USER":
				img.user = in.args
			case "WORKDIR":
				img.workdir = in.args
			case "EXPOSE":
				img.expose = append(img.expose, strings.Fields(in.args)...)
			case "HEALTHCHECK":
				opts, c, ok := strings.Cut(in.args, "CMD ")
				if !ok {
					t.Fatalf("Dockerfile:%d: HEALTHCHECK without CMD", in.line)
				}
				img.healthOpts, img.healthcheck = strings.TrimSpace(opts), execForm(t, c)
			default:
				t.Fatalf("Dockerfile:%d: %s in a final stage is not checked by this test; extend it", in.line, in.cmd)
			}
		}
		images[st.name] = img
	}
	return df, images
}

// local maps a path in the image to the built file.
func (img *image) local(t *testing.T, path string) string {
	t.Helper()
	p, ok := img.files[path]
	if !ok {
		t.Fatalf("image %s has no file %s", img.name, path)
	}
	return p
}

// checkStatic fails unless the file is a statically linked ELF executable.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("%s is dynamically linked", path)
		}
	}
}

// ---- processes ----

// cleanEnv is the test's environment without respgate's, the simulator's or the SDKs' settings, so
// nothing from the developer's shell leaks into what a process is configured with.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RESPGATE_") || strings.HasPrefix(k, "VLLM_SIM_") || strings.HasPrefix(k, "OPENAI_") ||
			strings.HasPrefix(k, "COMPOSE_") || k == "POSTGRES_PASSWORD" || k == "GOFLAGS" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is a long-running command started by a test, in its own process group.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

func startProcess(t *testing.T, name, dir string, env, argv []string) *process {
	t.Helper()
	p := &process{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if err := p.stop(15 * time.Second); err != nil {
			t.Logf("%s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, tail(p.out.String(), 4000))
		}
	})
	return p
}

// stop sends SIGTERM to the process group, then SIGKILL after grace. It returns the exit error.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.exitErr()
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitErr()
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("did not stop within %s of SIGTERM", grace)
	}
}

func (p *process) exitErr() error {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
		return nil // ended by our signal (make, shells)
	}
	return p.err
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitUntil polls cond every 100 ms until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() error, procs ...*process) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		if last = cond(); last == nil {
			return
		}
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("%s: %s exited early (%v):\n%s", what, p.name, p.err, tail(p.out.String(), 4000))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not ready after %s: %v", what, d, last)
}

func httpOK(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != 200 {
		return fmt.Errorf("%s: HTTP %d", url, res.StatusCode)
	}
	return nil
}

// runCmd runs argv to completion and returns its combined output.
func runCmd(dir string, env []string, timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	cmd.WaitDelay = time.Second
	b, err := cmd.CombinedOutput()
	return string(b), err
}
