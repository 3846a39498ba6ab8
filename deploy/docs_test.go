package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/internal/pgtest"
)

// The docs (README.md and docs/*.md) are executable. Every fenced block is one of:
//
//   - sh/bash: commands, run in order in bash (set -euo pipefail) in a fresh copy of the checkout,
//     against live servers, exactly as written (only the ports below are remapped); exported shell
//     variables (PATH included) carry over from block to block within a file, server blocks too. An
//     HTML comment on the line before the fence says how:
//     <!-- doctest: run expect="text" … -->    (the default) must exit 0; output must contain each expect
//     <!-- doctest: server ready=URL -->        long-running (a trailing & is dropped): started in the
//     background, ready when URL answers 200, stopped at the end of the file, or earlier by a
//     later server block's stop="COMMAND" (the user's Ctrl-C)
//     <!-- doctest: compose -->                 docker commands: validated against the Dockerfile and
//     docker-compose.yml; `docker compose --profile sim up` starts the emulated stack
//     (compose_test.go); other lines run
//     <!-- doctest: ci -->                      what .ci/run runs (make test): checked to be there
//   - go: <!-- doctest: go-run expect=… --> a program, run with go run inside the checkout;
//     <!-- doctest: same-as=PATH --> text that must appear verbatim in PATH.
//   - ts: <!-- doctest: typescript --> TypeScript SDK examples: not run here (no npm dependency in
//     go test); see the report in TestImages/Docs.
//   - json/text with <!-- doctest: output --> : the previous run block's output, compared.
//   - anything else (yaml, nginx, sql, text): data, not commands.
//
// A file may start servers it needs with <!-- doctest-setup: NAME -->: "respgate" (respgate with its
// built-in simulator on :8080), "postgres" (a fresh Postgres database in $DATABASE_URL and respgate
// on it at :8080). Ports 8080-8082 and 8000 in the docs are mapped to free ports; RESPGATE_LISTEN
// and VLLM_SIM_LISTEN point at them for commands that name no port (make run).

type docBlock struct {
	file, lang, text, kind string
	line                   int
	opts                   map[string][]string
}

var (
	annotationRE = regexp.MustCompile(`^<!-- doctest: (.*) -->$`)
	setupRE      = regexp.MustCompile(`(?m)^<!-- doctest-setup: ([a-z-]+) -->$`)
	optRE        = regexp.MustCompile(`([a-z-]+)(?:=("(?:[^"\\]|\\.)*"|\S+))?`)
)

func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	matches, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range matches {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(m, repoRoot+string(filepath.Separator))))
	}
	return files
}

func parseDoc(t *testing.T, name, src string) []docBlock {
	t.Helper()
	lines := strings.Split(src, "\n")
	var blocks []docBlock
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		indent := len(lines[i]) - len(trimmed)
		b := docBlock{file: name, line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), opts: map[string][]string{}}
		if i > 0 {
			if m := annotationRE.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
				for j, om := range optRE.FindAllStringSubmatch(m[1], -1) {
					val := om[2]
					if uq, err := strconv.Unquote(val); err == nil {
						val = uq
					}
					if j == 0 && om[2] == "" {
						b.kind = om[1]
						continue
					}
					b.opts[om[1]] = append(b.opts[om[1]], val)
				}
			}
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			l := lines[i]
			if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
				l = l[indent:]
			}
			body = append(body, l)
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: unterminated code block", name, b.line)
		}
		b.text = strings.Join(body, "\n") + "\n"
		switch b.lang {
		case "sh", "bash", "shell", "console":
			if b.kind == "" {
				b.kind = "run"
			}
			if !slices.Contains([]string{"run", "server", "compose", "ci"}, b.kind) {
				t.Fatalf("%s:%d: a shell block must be run, server, compose or ci, not %q", name, b.line, b.kind)
			}
		case "go":
			if b.kind != "go-run" && len(b.opts["same-as"]) == 0 {
				t.Fatalf("%s:%d: a Go block must be annotated go-run or same-as=PATH", name, b.line)
			}
		case "ts", "typescript", "js", "javascript":
			if b.kind != "typescript" {
				t.Fatalf("%s:%d: a TypeScript block must be annotated typescript", name, b.line)
			}
		case "":
			t.Fatalf("%s:%d: give every code block a language", name, b.line)
		default:
			if b.kind != "" && b.kind != "output" {
				t.Fatalf("%s:%d: a %s block can only be annotated output", name, b.line, b.lang)
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// docScenario runs one file's blocks.
type docScenario struct {
	t         *testing.T
	images    map[string]*image
	dir       string // the checkout copy
	state     string // exported shell variables, carried between blocks
	ports     map[string]int
	env       []string
	servers   []*process
	stack     *composeStack
	last      string            // output of the last run block
	dsn       string            // the database of the postgres setup
	retention map[string]string // ids seeded by the retention check
}

var docPortRE = regexp.MustCompile(`:(8080|8081|8082|8000)\b`)

// subst maps the docs' ports (in host:port, URLs and :port listen addresses) to the scenario's.
func (s *docScenario) subst(text string) string {
	return docPortRE.ReplaceAllStringFunc(text, func(m string) string {
		return ":" + strconv.Itoa(s.ports[m[1:]])
	})
}

func checkDocs(t *testing.T, images map[string]*image) {
	ciRun := readRepoFile(t, ".ci/run")
	var typescript []string
	for _, name := range docFiles(t) {
		src := readRepoFile(t, name)
		blocks := parseDoc(t, name, src)
		t.Run(strings.TrimSuffix(filepath.Base(name), ".md"), func(t *testing.T) {
			if name == "docs/configuration.md" {
				checkConfigTable(t, src, "respgate", helpFlags(t, images["respgate"].local(t, "/usr/local/bin/respgate")))
				checkConfigTable(t, src, "vllm-sim", helpFlags(t, images["vllm-sim"].local(t, "/usr/local/bin/vllm-sim")))
			}
			s := &docScenario{t: t, images: images, dir: contextCopy(t), ports: map[string]int{}}
			s.state = filepath.Join(t.TempDir(), "state.sh")
			for _, p := range []string{"8080", "8081", "8082", "8000"} {
				s.ports[p] = freePort(t)
			}
			s.env = append(cleanEnv(),
				"GOFLAGS=-trimpath", // shares the build cache across checkout copies; changes nothing else
				"RESPGATE_LISTEN=127.0.0.1:"+strconv.Itoa(s.ports["8080"]),
				"VLLM_SIM_LISTEN=127.0.0.1:"+strconv.Itoa(s.ports["8000"]))
			for _, m := range setupRE.FindAllStringSubmatch(src, -1) {
				s.setup(m[1])
			}
			for _, b := range blocks {
				switch {
				case b.kind == "run":
					s.run(b)
				case b.kind == "server":
					s.server(b)
				case b.kind == "compose":
					s.compose(b)
				case b.kind == "ci":
					for _, line := range strings.Split(b.text, "\n") {
						cmd, _, _ := strings.Cut(line, "#")
						if cmd = strings.TrimSpace(cmd); cmd != "" && !strings.Contains(ciRun, "\n"+cmd+"\n") {
							t.Errorf("%s:%d: %q is marked as CI's command, but .ci/run does not run it", b.file, b.line, cmd)
						}
					}
				case b.kind == "go-run":
					s.goRun(b)
				case len(b.opts["same-as"]) > 0:
					want := readRepoFile(t, b.opts["same-as"][0])
					if !strings.Contains(want, b.text) {
						t.Errorf("%s:%d: the block is not a verbatim excerpt of %s; copy it again", b.file, b.line, b.opts["same-as"][0])
					}
				case b.kind == "typescript":
					for _, want := range []string{`from "openai"`, `baseURL: "http://localhost:8080/v1"`} {
						if !strings.Contains(b.text, want) {
							t.Errorf("%s:%d: TypeScript example lacks %s", b.file, b.line, want)
						}
					}
					typescript = append(typescript, fmt.Sprintf("%s:%d", b.file, b.line))
				case b.kind == "output":
					s.output(b)
				}
				if t.Failed() {
					t.FailNow()
				}
			}
		})
	}
	t.Logf("TypeScript SDK examples, not run by go test (the npm-based client checks in integration/clients run them): %v", typescript)
}

func (s *docScenario) fail(b docBlock, format string, a ...any) {
	s.t.Helper()
	s.t.Fatalf("%s:%d: %s", b.file, b.line, fmt.Sprintf(format, a...))
}

// setup starts the servers a file declares it needs.
func (s *docScenario) setup(name string) {
	t := s.t
	rg := s.images["respgate"]
	listen := "RESPGATE_LISTEN=127.0.0.1:" + strconv.Itoa(s.ports["8080"])
	switch name {
	case "respgate":
		env := append(slices.Clone(s.env), listen, "RESPGATE_DATABASE_URL=sqlite:"+filepath.Join(t.TempDir(), "respgate.db"))
		p := startProcess(t, "respgate (setup)", t.TempDir(), env, []string{rg.local(t, "/usr/local/bin/respgate")})
		waitUntil(t, 30*time.Second, "respgate", func() error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", s.ports["8080"])) }, p)
		s.servers = append(s.servers, p)
	case "postgres":
		s.dsn = freshDatabase(t)
		s.env = append(s.env, "DATABASE_URL="+s.dsn)
		env := append(slices.Clone(s.env), listen, "RESPGATE_DATABASE_URL="+s.dsn)
		p := startProcess(t, "respgate (setup)", t.TempDir(), env, []string{rg.local(t, "/usr/local/bin/respgate")})
		waitUntil(t, 30*time.Second, "respgate", func() error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", s.ports["8080"])) }, p)
		s.servers = append(s.servers, p)
	default:
		t.Fatalf("unknown doctest-setup %q", name)
	}
}

// freshDatabase creates a database of its own on the test server (pg_dump and pg_restore work on
// whole databases) and drops it when the test ends.
func freshDatabase(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	admin := u.String()
	name := fmt.Sprintf("respgate_doc_%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database (the test Postgres user needs CREATEDB): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func (s *docScenario) script(body string) string {
	return "set -euo pipefail\n[ -f " + strconv.Quote(s.state) + " ] && . " + strconv.Quote(s.state) + "\nset -a\n" +
		body + "\nset +a\nexport -p > " + strconv.Quote(s.state) + "\n"
}

func (s *docScenario) run(b docBlock) {
	text := s.subst(b.text)
	for _, check := range b.opts["check"] {
		s.preCheck(b, check)
	}
	out, err := runCmd(s.dir, s.env, 10*time.Minute, "bash", "-c", s.script(text))
	if err != nil {
		s.fail(b, "failed: %v\n--- command\n%s--- output\n%s", err, text, tail(out, 6000))
	}
	for _, want := range b.opts["expect"] {
		if !strings.Contains(out, s.subst(want)) {
			s.fail(b, "output lacks %q:\n%s", want, tail(out, 6000))
		}
	}
	for _, check := range b.opts["check"] {
		s.postCheck(b, check)
	}
	s.last = out
}

func (s *docScenario) server(b docBlock) {
	cmd := strings.TrimSpace(s.subst(b.text))
	if strings.Count(cmd, "\n") > 0 {
		s.fail(b, "a server block holds one command")
	}
	cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
	ready := b.opts["ready"]
	if len(ready) != 1 {
		s.fail(b, "a server block needs ready=URL")
	}
	for _, stop := range b.opts["stop"] {
		i := slices.IndexFunc(s.servers, func(p *process) bool { return p.name == s.subst(stop) })
		if i < 0 {
			s.fail(b, "stop=%q: no such server was started", stop)
		}
		if err := s.servers[i].stop(45 * time.Second); err != nil {
			s.fail(b, "stop %q: %v", stop, err)
		}
	}
	// The file's exported variables so far (a PATH an earlier block extended, say), then the command.
	script := "if [ -f " + strconv.Quote(s.state) + " ]; then . " + strconv.Quote(s.state) + "; fi\nexec env " + cmd
	p := startProcess(s.t, cmd, s.dir, s.env, []string{"bash", "-c", script})
	s.servers = append(s.servers, p)
	waitUntil(s.t, 5*time.Minute, b.file+": "+cmd, func() error { return httpOK(s.subst(ready[0])) }, p)
}

func (s *docScenario) output(b docBlock) {
	got := strings.TrimSpace(s.last)
	want := strings.TrimSpace(s.subst(b.text))
	if b.lang == "json" {
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			s.fail(b, "the previous command's output is not JSON: %v\n%s", err, got)
		}
		if err := json.Unmarshal([]byte(want), &w); err != nil {
			s.fail(b, "the documented output is not JSON: %v", err)
		}
		if !jsonEqualValues(g, w) {
			s.fail(b, "the documented output differs from the real one:\n%s", got)
		}
		return
	}
	if got != want {
		s.fail(b, "the documented output differs from the real one:\n%s", got)
	}
}

func (s *docScenario) goRun(b docBlock) {
	name := fmt.Sprintf("doctest_%s_%d", strings.NewReplacer("/", "_", ".", "_").Replace(b.file), b.line)
	dir := filepath.Join(s.dir, "doctest", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(s.subst(b.text)), 0o644); err != nil {
		s.t.Fatal(err)
	}
	out, err := runCmd(s.dir, s.env, 10*time.Minute, "go", "run", "./doctest/"+name)
	if err != nil {
		s.fail(b, "go run: %v\n%s", err, tail(out, 6000))
	}
	for _, want := range b.opts["expect"] {
		if !strings.Contains(out, want) {
			s.fail(b, "output lacks %q:\n%s", want, tail(out, 6000))
		}
	}
	s.last = out
}

// ---- docker commands ----

// shellWords splits a command line into words (single and double quotes, no expansions).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case strings.ContainsRune("|&;<>()$`\\*?", rune(c)):
			return nil, fmt.Errorf("shell syntax %q in a docker command: keep docker lines simple", c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

var dockerLineRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*=\S*\s+)*docker\s`)

func (s *docScenario) compose(b docBlock) {
	text := strings.ReplaceAll(b.text, "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		cmd, _, _ := strings.Cut(line, " #")
		if cmd = strings.TrimSpace(cmd); cmd == "" || strings.HasPrefix(cmd, "#") {
			continue
		}
		if !dockerLineRE.MatchString(cmd) {
			out, err := runCmd(s.dir, s.env, time.Minute, "bash", "-c", s.script(s.subst(cmd)))
			if err != nil {
				s.fail(b, "%q: %v\n%s", cmd, err, out)
			}
			continue
		}
		// One trailing redirection of a docker command to or from a file (backups) is allowed.
		if m := regexp.MustCompile(`^(docker .*?) [<>] [A-Za-z0-9._/-]+$`).FindStringSubmatch(cmd); m != nil {
			cmd = m[1]
		}
		words, err := shellWords(cmd)
		if err != nil {
			s.fail(b, "%q: %v", cmd, err)
		}
		env := map[string]string{}
		for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			k, v, _ := strings.Cut(words[0], "=")
			env[k], words = v, words[1:]
		}
		s.docker(b, cmd, env, words[1:])
	}
}

func (s *docScenario) docker(b docBlock, line string, env map[string]string, args []string) {
	t := s.t
	df := parseDockerfile(t, readRepoFile(t, "Dockerfile"))
	if len(args) == 0 {
		s.fail(b, "%q: no docker subcommand", line)
	}
	switch args[0] {
	case "build":
		var target string
		rest := args[1:]
		for len(rest) > 1 && strings.HasPrefix(rest[0], "-") {
			switch rest[0] {
			case "-t", "--tag":
			case "--target":
				target = rest[1]
			default:
				s.fail(b, "%q: docker build option %s is not checked; extend the test", line, rest[0])
			}
			rest = rest[2:]
		}
		if !slices.Equal(rest, []string{"."}) {
			s.fail(b, "%q: build the repository root (.)", line)
		}
		if target != "" {
			df.stage(t, target)
		}
	case "compose":
		s.dockerCompose(b, line, env, args[1:])
	default:
		s.fail(b, "%q: docker %s is not checked; extend the test", line, args[0])
	}
}

func (s *docScenario) dockerCompose(b docBlock, line string, prefix map[string]string, args []string) {
	t := s.t
	// Compose reads .env in the project directory; the command's own environment wins over it.
	env := map[string]string{}
	if _, err := os.Stat(filepath.Join(s.dir, ".env")); err == nil {
		env = parseEnvFileAt(t, filepath.Join(s.dir, ".env"))
	}
	for k, v := range prefix {
		env[k] = v
	}
	doc := loadCompose(t, env)
	services := mapAt(t, doc, "services")
	knownProfiles := map[string]bool{}
	for _, name := range sortedKeys(services) {
		for _, p := range profilesOf(t, mapAt(t, services, name)) {
			knownProfiles[p] = true
		}
	}
	var profiles []string
	for len(args) > 1 && args[0] == "--profile" {
		if !knownProfiles[args[1]] {
			s.fail(b, "%q: unknown profile %s", line, args[1])
		}
		profiles, args = append(profiles, args[1]), args[2:]
	}
	if len(args) == 0 {
		s.fail(b, "%q: no compose subcommand", line)
	}
	sub, rest := args[0], args[1:]
	service := func(name string) {
		if _, ok := services[name]; !ok {
			s.fail(b, "%q: no service %s in docker-compose.yml", line, name)
		}
	}
	scale := map[string]int{}
	var named []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case sub == "exec":
			if a == "-T" {
				continue
			}
			service(a)
			s.composeExec(b, line, mapAt(t, services, a), rest[i+1:])
			return
		case a == "--scale" && i+1 < len(rest):
			name, n, _ := strings.Cut(rest[i+1], "=")
			service(name)
			scale[name], _ = strconv.Atoi(n)
			i++
		case slices.Contains([]string{"-d", "--detach", "--build", "--wait", "-v", "--volumes", "-f", "--follow", "--no-deps"}, a):
		case strings.HasPrefix(a, "-"):
			s.fail(b, "%q: compose option %s is not checked; extend the test", line, a)
		default:
			service(a)
			named = append(named, a)
		}
	}
	switch sub {
	case "up":
		if len(profiles) != 1 {
			s.fail(b, "%q: pick exactly one profile (sim or gpu)", line)
		}
		if n := scale["respgate"]; n > 1 {
			ports := stringsAt(t, mapAt(t, services, "respgate")["ports"], "ports")
			host, _, _ := strings.Cut(ports[0], ":")
			lo, hi, isRange := strings.Cut(host, "-")
			a, _ := strconv.Atoi(lo)
			z, _ := strconv.Atoi(hi)
			if !isRange || z-a+1 < n {
				s.fail(b, "%q: %d replicas need a host port range of %d ports (RESPGATE_PORT), have %q", line, n, n, host)
			}
		}
		if profiles[0] != "sim" {
			return // the gpu profile needs a GPU and vLLM: validated above, not run
		}
		if s.stack != nil {
			for _, p := range s.stack.procs {
				_ = p.stop(40 * time.Second)
			}
		}
		replicas := max(scale["respgate"], 1)
		ports := []int{s.ports["8080"], s.ports["8081"], s.ports["8082"]}
		if replicas > len(ports) {
			s.fail(b, "%q: the docs emulate at most 3 replicas", line)
		}
		s.stack = startComposeSim(t, s.images, composeOpts{replicas: replicas, ports: ports[:replicas], workdir: s.dir, env: env})
	case "down":
		if s.stack != nil {
			for _, p := range s.stack.procs {
				if err := p.stop(40 * time.Second); err != nil {
					s.fail(b, "%q: %s: %v", line, p.name, err)
				}
			}
			s.stack = nil
		}
	case "logs", "ps", "build", "pull", "restart", "stop", "start", "config":
	default:
		s.fail(b, "%q: compose %s is not checked; extend the test", line, sub)
	}
	_ = named
}

// composeExec checks a `docker compose exec postgres …` command: only Postgres' own client tools,
// with the user and database the compose file creates.
func (s *docScenario) composeExec(b docBlock, line string, svc map[string]any, argv []string) {
	t := s.t
	img, _ := svc["image"].(string)
	if !strings.HasPrefix(img, "postgres:") || len(argv) == 0 {
		s.fail(b, "%q: only exec into postgres is checked", line)
	}
	if !slices.Contains([]string{"pg_dump", "pg_restore", "psql"}, argv[0]) {
		s.fail(b, "%q: %s is not checked; extend the test", line, argv[0])
	}
	env := serviceEnv(t, svc)
	if i := slices.Index(argv, "-U"); i < 0 || argv[i+1] != env["POSTGRES_USER"] {
		s.fail(b, "%q: connect as -U %s", line, env["POSTGRES_USER"])
	}
	db := env["POSTGRES_DB"]
	if !slices.Contains(argv, db) && !slices.Contains(argv, "--dbname="+db) {
		s.fail(b, "%q: name the database %s", line, db)
	}
	// The local binary must accept the arguments as written.
	if out, err := runCmd("", cleanEnv(), time.Minute, argv[0], "--help"); err != nil {
		s.fail(b, "%s --help: %v\n%s", argv[0], err, out)
	}
}

// ---- checks for specific blocks ----

// preCheck and postCheck surround a block annotated check=NAME with assertions about its effect.
func (s *docScenario) preCheck(b docBlock, check string) {
	switch check {
	case "retention":
		s.retentionSeed(b)
	default:
		s.fail(b, "unknown check %q", check)
	}
}

func (s *docScenario) postCheck(b docBlock, check string) {
	if check == "retention" {
		s.retentionVerify(b)
	}
}

// retentionSeed stores, under a key of its own, responses the retention SQL must delete (aged 40
// days) and keep (recent ones, conversation items).
func (s *docScenario) retentionSeed(b docBlock) {
	t := s.t
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", s.ports["8080"])
	post := func(path, body string) map[string]any {
		out, err := apiCall("POST", base+path, "retention-check", body)
		if err != nil {
			s.fail(b, "seed %s: %v", path, err)
		}
		return out
	}
	old := post("/responses", `{"model":"openai/gpt-oss-sim","input":"remember: old fact"}`)
	recent := post("/responses", fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"remember: new fact","previous_response_id":%q}`, old["id"]))
	conv := post("/conversations", `{}`)
	inConv := post("/responses", fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"remember: conversation fact","conversation":%q}`, conv["id"]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, `UPDATE responses SET created_at = now() - interval '40 days' WHERE id = ANY($1)`,
		[]string{old["id"].(string), inConv["id"].(string)})
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("age the seeded responses: %v (%d rows)", err, tag.RowsAffected())
	}
	items, err := apiCall("GET", base+"/conversations/"+conv["id"].(string)+"/items", "retention-check", "")
	if err != nil {
		t.Fatal(err)
	}
	s.retention = map[string]string{"old": old["id"].(string), "recent": recent["id"].(string),
		"conv": conv["id"].(string), "inConv": inConv["id"].(string), "items": jsonText(items["data"])}
}

// retentionVerify: aged responses are gone, recent ones stay, a conversation keeps its items, and
// continuing a response whose ancestor was deleted is the documented 400.
func (s *docScenario) retentionVerify(b docBlock) {
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", s.ports["8080"])
	r := s.retention
	for _, id := range []string{r["old"], r["inConv"]} {
		if _, err := apiCall("GET", base+"/responses/"+id, "retention-check", ""); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
			s.fail(b, "aged response %s after the retention SQL: %v, want 404", id, err)
		}
	}
	if _, err := apiCall("GET", base+"/responses/"+r["recent"], "retention-check", ""); err != nil {
		s.fail(b, "a recent response was deleted: %v", err)
	}
	items, err := apiCall("GET", base+"/conversations/"+r["conv"]+"/items", "retention-check", "")
	if err != nil || jsonText(items["data"]) != r["items"] {
		s.fail(b, "the conversation's items changed: %v\nbefore: %s\nafter:  %s", err, r["items"], jsonText(items["data"]))
	}
	_, err = apiCall("POST", base+"/responses", "retention-check",
		fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"and now?","previous_response_id":%q}`, r["recent"]))
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), r["old"]) {
		s.fail(b, "continuing a response whose ancestor retention deleted: %v, want a 400 naming %s", err, r["old"])
	}
}

// apiCall sends a JSON request and decodes the answer; a non-2xx status is an error with the body.
func apiCall(method, url, key, body string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		return nil, fmt.Errorf("HTTP %d: %s", res.StatusCode, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode %s: %v", b, err)
	}
	return out, nil
}

// moduleInstallRE matches installing respgate's commands through the module proxy, which cannot
// work: the module is not published.
var moduleInstallRE = regexp.MustCompile(`go (install|get) [^\n]*github\.com/respgate/respgate/[^\s]*@`)

// TestDocsNeverInstallFromTheModuleProxy: every command and CI example in the docs builds respgate
// from a checkout (the doc runner runs the commands as written, so one that cannot work fails
// there too, but only after building the images).
func TestDocsNeverInstallFromTheModuleProxy(t *testing.T) {
	for _, name := range docFiles(t) {
		for _, b := range parseDoc(t, name, readRepoFile(t, name)) {
			if m := moduleInstallRE.FindString(b.text); m != "" {
				t.Errorf("%s:%d: %q: the module is not published; build from a checkout (make build, bin/ on PATH)", b.file, b.line, m)
			}
		}
	}
}

// checkConfigTable compares the flag table under "## <section>" with the binary's -h output: the
// same flags, each with its environment variable and default.
func checkConfigTable(t *testing.T, src, section string, flags []flagDoc) {
	t.Helper()
	_, after, ok := strings.Cut(src, "\n## "+section+"\n")
	if !ok {
		t.Fatalf("docs/configuration.md has no section %q", section)
	}
	after, _, _ = strings.Cut(after, "\n## ")
	cell := regexp.MustCompile("^`([^`]*)`")
	documented := map[string]bool{}
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 4 {
			t.Errorf("%s table row %q: want 4 cells", section, line)
			continue
		}
		name := strings.TrimPrefix(strings.Trim(cells[0], "`"), "--")
		documented[name] = true
		i := slices.IndexFunc(flags, func(f flagDoc) bool { return f.name == name })
		if i < 0 {
			t.Errorf("%s: the docs list --%s, which does not exist", section, name)
			continue
		}
		f := flags[i]
		env := "none"
		if m := cell.FindStringSubmatch(cells[1]); m != nil {
			env = m[1]
		}
		if want := f.env; (want == "" && env != "none") || (want != "" && env != want) {
			t.Errorf("%s --%s: documented variable %q, the binary reads %q", section, name, env, want)
		}
		def := ""
		if m := cell.FindStringSubmatch(cells[2]); m != nil {
			def = m[1]
		} else if cells[2] != "empty" {
			t.Errorf("%s --%s: write the default as `value` or empty", section, name)
		}
		want := f.def
		if want == "" && (f.typ == "int" || f.typ == "uint") {
			want = "0"
		}
		if want == "" && f.typ == "duration" {
			want = "0s" // flag's -h leaves a zero default out
		}
		if f.typ == "duration" {
			d1, err1 := time.ParseDuration(def)
			d2, err2 := time.ParseDuration(want)
			if err1 != nil || err2 != nil || d1 != d2 {
				t.Errorf("%s --%s: documented default %q, the binary's is %q", section, name, def, want)
			}
		} else if def != want {
			t.Errorf("%s --%s: documented default %q, the binary's is %q", section, name, def, want)
		}
	}
	for _, f := range flags {
		if !documented[f.name] {
			t.Errorf("%s: --%s (%s) is not in docs/configuration.md", section, f.name, f.env)
		}
	}
}
