package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/internal/pgtest"
)

// ---- interpolation (Compose Specification, 12-interpolation.md) ----

// interpolate applies Compose's variable substitution to every string value (not to keys):
// $$ is a literal $, $VAR and ${VAR} substitute, ${VAR:-d}/${VAR-d} default when unset-or-empty /
// unset, ${VAR:?e}/${VAR?e} fail, ${VAR:+r}/${VAR+r} replace when set. Defaults may nest.
func interpolate(v any, env map[string]string) (any, error) {
	switch x := v.(type) {
	case string:
		return interpolateString(x, env)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := interpolate(e, env)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := interpolate(e, env)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)

func interpolateString(s string, env map[string]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			depth, j := 1, i+2
			for ; j < len(s) && depth > 0; j++ {
				switch s[j] {
				case '{':
					depth++
				case '}':
					depth--
				}
			}
			if depth != 0 {
				return "", fmt.Errorf("unterminated ${ in %q", s)
			}
			r, err := expandBraced(s[i+2:j-1], env)
			if err != nil {
				return "", err
			}
			b.WriteString(r)
			i = j - 1
			continue
		}
		name := varName.FindString(s[i+1:])
		if name == "" {
			return "", fmt.Errorf("invalid $ in %q (write $$ for a literal $)", s)
		}
		b.WriteString(env[name])
		i += len(name)
	}
	return b.String(), nil
}

func expandBraced(expr string, env map[string]string) (string, error) {
	name := varName.FindString(expr)
	if name == "" {
		return "", fmt.Errorf("invalid variable expression ${%s}", expr)
	}
	val, set := env[name]
	rest := expr[len(name):]
	if rest == "" {
		return val, nil
	}
	for _, op := range []string{":-", ":?", ":+", "-", "?", "+"} {
		arg, ok := strings.CutPrefix(rest, op)
		if !ok {
			continue
		}
		colon := strings.HasPrefix(op, ":")
		present := set && (!colon || val != "")
		switch op[len(op)-1] {
		case '-':
			if present {
				return val, nil
			}
			return interpolateString(arg, env)
		case '?':
			if present {
				return val, nil
			}
			return "", fmt.Errorf("required variable %s is missing a value: %s", name, arg)
		case '+':
			if present {
				return interpolateString(arg, env)
			}
			return "", nil
		}
	}
	return "", fmt.Errorf("invalid variable expression ${%s}", expr)
}

// ---- the compose file ----

func loadCompose(t *testing.T, env map[string]string) map[string]any {
	t.Helper()
	raw, err := decodeYAML(readRepoFile(t, "docker-compose.yml"))
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	v, err := interpolate(raw, env)
	if err != nil {
		t.Fatalf("docker-compose.yml: interpolation: %v", err)
	}
	return v.(map[string]any)
}

func composeSchema(t *testing.T) *schemaValidator {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "compose-spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "compose-spec.SOURCE"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if !strings.Contains(string(src), "sha256:     "+hex.EncodeToString(sum[:])) {
		t.Fatalf("testdata/compose-spec.json (sha256 %x) is not the file testdata/compose-spec.SOURCE describes", sum)
	}
	v, err := newSchemaValidator(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// parseEnvFile reads a Compose/Docker env file: KEY=value lines, # comments, blank lines. Quotes
// and other forms fail, so the file means the same to every reader.
func parseEnvFile(t *testing.T, name string) map[string]string {
	t.Helper()
	return parseEnvFileAt(t, filepath.Join(repoRoot, name))
}

func parseEnvFileAt(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !varName.MatchString(k) || varName.FindString(k) != k {
			t.Fatalf("%s:%d: want KEY=value", name, i+1)
		}
		if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, `'`) || strings.Contains(v, "$") || strings.Contains(v, " #") {
			t.Fatalf("%s:%d: quotes, $ and inline comments are read differently by different tools; avoid them", name, i+1)
		}
		if _, dup := out[k]; dup {
			t.Fatalf("%s:%d: duplicate %s", name, i+1, k)
		}
		out[k] = v
	}
	return out
}

func mapAt(t *testing.T, v any, path ...string) map[string]any {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("compose: %s is not a mapping", strings.Join(path, "."))
		}
		v = m[p]
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("compose: %s is not a mapping", strings.Join(path, "."))
	}
	return m
}

func stringsAt(t *testing.T, v any, what string) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("compose: %s is not a list", what)
	}
	out := make([]string, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			t.Fatalf("compose: %s[%d] is not a string", what, i)
		}
		out[i] = s
	}
	return out
}

// serviceEnv is a service's environment mapping (the compose file uses the mapping form).
func serviceEnv(t *testing.T, svc map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	if svc["environment"] == nil {
		return out
	}
	for k, v := range mapAt(t, svc["environment"]) {
		switch x := v.(type) {
		case string:
			out[k] = x
		case nil:
			out[k] = ""
		default:
			t.Fatalf("compose: environment %s must be a string", k)
		}
	}
	return out
}

func profilesOf(t *testing.T, svc map[string]any) []string {
	if svc["profiles"] == nil {
		return nil
	}
	return stringsAt(t, svc["profiles"], "profiles")
}

func enabled(t *testing.T, svc map[string]any, active []string) bool {
	p := profilesOf(t, svc)
	return len(p) == 0 || slices.ContainsFunc(p, func(s string) bool { return slices.Contains(active, s) })
}

// ---- flags and environment variables, from the binaries themselves ----

type flagDoc struct {
	name, typ, env, def, usage string
}

var (
	helpFlag    = regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)
	helpEnv     = regexp.MustCompile(`\((?:env )?((?:RESPGATE|VLLM_SIM)_[A-Z0-9_]+)\)`)
	helpDefault = regexp.MustCompile(`\(default (.*)\)$`)
)

// helpFlags runs `bin -h` with a clean environment (so defaults are the built-in ones) and parses
// Go's flag usage output.
func helpFlags(t *testing.T, bin string) []flagDoc {
	t.Helper()
	out, _ := runCmd("", cleanEnv(), 30*time.Second, bin, "-h")
	var flags []flagDoc
	for _, line := range strings.Split(out, "\n") {
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			typ := m[2]
			if typ == "" {
				typ = "bool"
			}
			flags = append(flags, flagDoc{name: m[1], typ: typ})
			continue
		}
		if len(flags) > 0 && strings.HasPrefix(line, "    \t") {
			f := &flags[len(flags)-1]
			u := strings.TrimSpace(line)
			f.usage = strings.TrimSpace(f.usage + " " + u)
			if m := helpEnv.FindStringSubmatch(u); m != nil {
				f.env = m[1]
			}
			if m := helpDefault.FindStringSubmatch(u); m != nil {
				f.def = strings.Trim(m[1], `"`)
			}
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s -h printed no flags:\n%s", bin, out)
	}
	return flags
}

func envNames(flags []flagDoc) []string {
	var out []string
	for _, f := range flags {
		if f.env != "" {
			out = append(out, f.env)
		}
	}
	return out
}

func flagDefault(t *testing.T, flags []flagDoc, name string) string {
	t.Helper()
	for _, f := range flags {
		if f.name == name {
			return f.def
		}
	}
	t.Fatalf("no flag --%s", name)
	return ""
}

// ---- tests ----

func TestComposeFileValidatesAgainstTheComposeSpecSchema(t *testing.T) {
	v := composeSchema(t)
	dotenv := parseEnvFile(t, ".env.example")
	for name, env := range map[string]map[string]string{"no variables set": {}, ".env.example": dotenv} {
		doc := loadCompose(t, env)
		if errs := v.Validate(doc); len(errs) > 0 {
			t.Errorf("docker-compose.yml with %s does not validate against the Compose Specification schema:\n  %s",
				name, strings.Join(errs, "\n  "))
		}
	}
	// Every variable the compose file reads is in .env.example, and nothing else is.
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(readRepoFile(t, "docker-compose.yml"), -1) {
		used[m[1]] = true
	}
	for k := range used {
		if _, ok := dotenv[k]; !ok {
			t.Errorf("docker-compose.yml reads ${%s}, which .env.example does not document", k)
		}
	}
	for k := range dotenv {
		if !used[k] && !strings.HasPrefix(k, "COMPOSE_") {
			t.Errorf(".env.example sets %s, which docker-compose.yml does not read", k)
		}
	}
}

// The validator must not pass everything: each mistake below is one the schema forbids.
func TestComposeSchemaValidationCatchesMistakes(t *testing.T) {
	v := composeSchema(t)
	for name, mutate := range map[string]func(doc map[string]any){
		"unknown service key": func(d map[string]any) { mapAt(t, d, "services", "respgate")["replica"] = int64(2) },
		"bad depends_on": func(d map[string]any) {
			mapAt(t, d, "services", "respgate", "depends_on", "postgres")["condition"] = "healthy"
		},
		"ports as a mapping":   func(d map[string]any) { mapAt(t, d, "services", "respgate")["ports"] = map[string]any{"8080": "8080"} },
		"healthcheck typo":     func(d map[string]any) { mapAt(t, d, "services", "postgres", "healthcheck")["intervall"] = "5s" },
		"unknown top-level":    func(d map[string]any) { d["service"] = map[string]any{} },
		"bad gpu reservation":  func(d map[string]any) { mapAt(t, d, "services", "vllm", "deploy", "resources")["reservations"] = "gpu" },
		"profiles not strings": func(d map[string]any) { mapAt(t, d, "services", "vllm")["profiles"] = []any{int64(1)} },
	} {
		doc := loadCompose(t, map[string]string{})
		mutate(doc)
		if errs := v.Validate(doc); len(errs) == 0 {
			t.Errorf("%s: the mutated compose file still validates", name)
		}
	}
}

func TestInterpolation(t *testing.T) {
	env := map[string]string{"SET": "v", "EMPTY": ""}
	for in, want := range map[string]string{
		"${SET}": "v", "$SET": "v", "$$SET": "$SET", "${UNSET:-d}": "d", "${EMPTY:-d}": "d", "${EMPTY-d}": "",
		"${UNSET-${SET}}": "v", "${SET:+r}": "r", "${UNSET:+r}": "", "a${SET}b": "avb",
	} {
		if got, err := interpolateString(in, env); err != nil || got != want {
			t.Errorf("%q → %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"${UNSET:?needed}", "${EMPTY:?needed}", "${", "$ x"} {
		if _, err := interpolateString(in, env); err == nil {
			t.Errorf("%q: want an error", in)
		}
	}
}

// checkComposeAgainstTheCode checks what the compose file names against the code: services and
// profiles, dependencies and healthchecks, ports, URLs, environment variables (against the
// binaries' own -h output), images and the Dockerfile's targets.
func checkComposeAgainstTheCode(t *testing.T, df *dockerfile, images map[string]*image) {
	raw := readRepoFile(t, "docker-compose.yml")
	doc := loadCompose(t, map[string]string{})
	services := mapAt(t, doc, "services")
	if got := sortedKeys(services); !slices.Equal(got, []string{"postgres", "respgate", "respgate-fleet", "vllm", "vllm-fleet", "vllm-sim"}) {
		t.Fatalf("services = %v", got)
	}
	svc := func(name string) map[string]any { return mapAt(t, services, name) }
	rgFlags := helpFlags(t, images["respgate"].local(t, "/usr/local/bin/respgate"))
	simFlags := helpFlags(t, images["vllm-sim"].local(t, "/usr/local/bin/vllm-sim"))

	// Profiles: postgres and respgate always; exactly one model server per profile.
	if p := profilesOf(t, svc("vllm")); !slices.Equal(p, []string{"gpu"}) {
		t.Errorf("vllm profiles = %v, want [gpu]", p)
	}
	if p := profilesOf(t, svc("vllm-sim")); !slices.Equal(p, []string{"sim"}) {
		t.Errorf("vllm-sim profiles = %v, want [sim]", p)
	}
	// The fleet profile (docs/fleet.md): two simulated replicas behind a respgate of their own.
	for _, name := range []string{"vllm-fleet", "respgate-fleet"} {
		if p := profilesOf(t, svc(name)); !slices.Equal(p, []string{"fleet"}) {
			t.Errorf("%s profiles = %v, want [fleet]", name, p)
		}
	}
	for _, name := range []string{"postgres", "respgate"} {
		if p := profilesOf(t, svc(name)); len(p) != 0 {
			t.Errorf("%s must be in every profile, has profiles %v", name, p)
		}
	}

	// Healthchecks: every service has one (compose's own or its image's).
	health := map[string][]string{}
	for _, name := range sortedKeys(services) {
		hc := mapAt(t, svc(name), "healthcheck")
		test := stringsAt(t, hc["test"], name+".healthcheck.test")
		if test[0] != "CMD" {
			t.Errorf("%s healthcheck: use the exec form [\"CMD\", …], not %q", name, test[0])
		}
		health[name] = test[1:]
	}

	// Dependencies, per profile: whatever is enabled starts in order, and nothing required is
	// disabled by the profile.
	deps := mapAt(t, svc("respgate"), "depends_on")
	for _, active := range [][]string{{"sim"}, {"gpu"}, {"fleet"}, nil} {
		for _, name := range sortedKeys(services) {
			if !enabled(t, svc(name), active) || svc(name)["depends_on"] == nil {
				continue
			}
			for _, dep := range sortedKeys(mapAt(t, svc(name), "depends_on")) {
				d := mapAt(t, svc(name), "depends_on", dep)
				if _, ok := services[dep]; !ok {
					t.Errorf("%s depends on unknown service %s", name, dep)
					continue
				}
				if !enabled(t, svc(dep), active) && d["required"] != false {
					t.Errorf("profile %v: %s requires %s, which the profile disables; mark it required: false", active, name, dep)
				}
				if d["condition"] != "service_healthy" {
					t.Errorf("%s → %s: condition %v, want service_healthy", name, dep, d["condition"])
				}
			}
		}
	}
	if mapAt(t, deps, "postgres")["required"] == false {
		t.Error("respgate must require postgres")
	}

	// The upstream URL names one model server in each profile, on the port it listens on.
	env := serviceEnv(t, svc("respgate"))
	up, err := url.Parse(env["RESPGATE_UPSTREAM_URL"])
	if err != nil || up.Path != "/v1" {
		t.Fatalf("RESPGATE_UPSTREAM_URL %q: want http://HOST:PORT/v1", env["RESPGATE_UPSTREAM_URL"])
	}
	for profile, server := range map[string]string{"sim": "vllm-sim", "gpu": "vllm", "fleet": "vllm-fleet"} {
		var resolves []string
		for _, name := range sortedKeys(services) {
			if !enabled(t, svc(name), []string{profile}) {
				continue
			}
			names := []string{name}
			if nets, ok := svc(name)["networks"].(map[string]any); ok {
				for _, n := range nets {
					if m, ok := n.(map[string]any); ok && m["aliases"] != nil {
						names = append(names, stringsAt(t, m["aliases"], name+" aliases")...)
					}
				}
			}
			if slices.Contains(names, up.Hostname()) {
				resolves = append(resolves, name)
			}
		}
		if !slices.Equal(resolves, []string{server}) {
			t.Errorf("profile %s: upstream host %q resolves to %v, want [%s]", profile, up.Hostname(), resolves, server)
		}
		if !slices.Contains(sortedKeys(deps), server) {
			t.Errorf("respgate does not wait for %s", server)
		}
	}
	vllmCmd := stringsAt(t, svc("vllm")["command"], "vllm.command")
	if !slices.Contains(vllmCmd, "--port="+up.Port()) {
		t.Errorf("vllm command %v does not listen on the upstream URL's port %s", vllmCmd, up.Port())
	}
	simCmd := stringsAt(t, svc("vllm-sim")["command"], "vllm-sim.command")
	if i := slices.Index(simCmd, "--listen"); i < 0 || i+1 >= len(simCmd) || simCmd[i+1] != ":"+up.Port() {
		t.Errorf("vllm-sim command %v does not listen on the upstream URL's port %s", simCmd, up.Port())
	}
	if !slices.Contains(health["vllm-sim"], "http://127.0.0.1:"+up.Port()+"/v1/models") {
		t.Errorf("vllm-sim healthcheck %v does not probe /v1/models on its port", health["vllm-sim"])
	}
	if !strings.Contains(strings.Join(health["vllm"], " "), "http://127.0.0.1:"+up.Port()+"/health") {
		t.Errorf("vllm healthcheck %v does not probe vLLM's /health on its port", health["vllm"])
	}

	// The database URL names the postgres service with the credentials it is created with.
	pgEnv := serviceEnv(t, svc("postgres"))
	db, err := url.Parse(env["RESPGATE_DATABASE_URL"])
	if err != nil || db.Scheme != "postgres" {
		t.Fatalf("RESPGATE_DATABASE_URL %q is not a postgres:// URL", env["RESPGATE_DATABASE_URL"])
	}
	pw, _ := db.User.Password()
	if db.Hostname() != "postgres" || db.Port() != "5432" || db.User.Username() != pgEnv["POSTGRES_USER"] ||
		pw != pgEnv["POSTGRES_PASSWORD"] || strings.TrimPrefix(db.Path, "/") != pgEnv["POSTGRES_DB"] {
		t.Errorf("RESPGATE_DATABASE_URL %q does not match the postgres service (%v)", db.Redacted(), pgEnv)
	}
	if want := []string{"pg_isready", "-U", pgEnv["POSTGRES_USER"], "-d", pgEnv["POSTGRES_DB"]}; !slices.Equal(health["postgres"], want) {
		t.Errorf("postgres healthcheck %v, want %v", health["postgres"], want)
	}

	// Environment variables: each one a program reads.
	rgEnv := envNames(rgFlags)
	fileEnv := parseEnvFile(t, "deploy/respgate.env.example")
	if files := stringsAt(t, svc("respgate")["env_file"], "respgate.env_file"); !slices.Equal(files, []string{"deploy/respgate.env"}) {
		t.Errorf("respgate env_file = %v, want [deploy/respgate.env] (from deploy/respgate.env.example)", files)
	}
	if !dockerignored(dockerignoreRules(t), "deploy/respgate.env") || !dockerignored(dockerignoreRules(t), ".env") {
		t.Error(".dockerignore must keep deploy/respgate.env and .env (secrets) out of the build context")
	}
	for _, k := range append(sortedKeys(env), sortedKeys(fileEnv)...) {
		if !slices.Contains(rgEnv, k) {
			t.Errorf("respgate's environment sets %s, which respgate does not read (it reads %v)", k, rgEnv)
		}
	}
	for k := range fileEnv {
		if _, ok := env[k]; ok {
			t.Errorf("deploy/respgate.env.example sets %s, which docker-compose.yml overrides", k)
		}
	}
	if _, ok := fileEnv["RESPGATE_API_KEYS"]; !ok {
		t.Error("deploy/respgate.env.example must set RESPGATE_API_KEYS")
	}
	for k := range serviceEnv(t, svc("vllm-sim")) {
		if !slices.Contains(envNames(simFlags), k) {
			t.Errorf("vllm-sim's environment sets %s, which vllm-sim does not read", k)
		}
	}
	fleetEnv := serviceEnv(t, svc("respgate-fleet"))
	for k := range fleetEnv {
		if !slices.Contains(rgEnv, k) {
			t.Errorf("respgate-fleet's environment sets %s, which respgate does not read", k)
		}
	}
	if fleetEnv["RESPGATE_DATABASE_URL"] != env["RESPGATE_DATABASE_URL"] || fleetEnv["RESPGATE_LISTEN"] != env["RESPGATE_LISTEN"] {
		t.Error("respgate-fleet must share respgate's database and listen address")
	}
	if vols := stringsAt(t, svc("respgate-fleet")["volumes"], "respgate-fleet.volumes"); len(vols) != 1 ||
		vols[0] != "./deploy/upstreams.fleet.yaml:"+fleetEnv["RESPGATE_UPSTREAMS"]+":ro" {
		t.Errorf("respgate-fleet volumes %v must mount deploy/upstreams.fleet.yaml read-only at RESPGATE_UPSTREAMS", vols)
	}
	fleetCmd := stringsAt(t, svc("vllm-fleet")["command"], "vllm-fleet.command")
	if i := slices.Index(fleetCmd, "--instances"); i < 0 || i+1 >= len(fleetCmd) || fleetCmd[i+1] != "2" {
		t.Errorf("vllm-fleet command %v does not serve two instances", fleetCmd)
	}
	for _, f := range fleetCmd {
		if name, ok := strings.CutPrefix(f, "--"); ok {
			flagDefault(t, simFlags, name) // fails on a flag vllm-sim does not have
		}
	}
	for k := range pgEnv {
		if !slices.Contains([]string{"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}, k) {
			t.Errorf("postgres environment %s is not one the postgres image documents here", k)
		}
	}
	for k := range serviceEnv(t, svc("vllm")) {
		if k != "HF_TOKEN" {
			t.Errorf("vllm environment %s: unexpected", k)
		}
	}

	// Ports: the published container port is the one respgate listens on and the image exposes.
	ports := stringsAt(t, svc("respgate")["ports"], "respgate.ports")
	listen := env["RESPGATE_LISTEN"]
	if len(ports) != 1 || !strings.HasSuffix(ports[0], ":"+strings.TrimPrefix(listen, ":")) || !strings.HasPrefix(listen, ":") {
		t.Errorf("respgate ports %v do not publish RESPGATE_LISTEN %q", ports, listen)
	}
	if !slices.Contains(images["respgate"].expose, strings.TrimPrefix(listen, ":")) {
		t.Errorf("the respgate image exposes %v, not the port respgate listens on (%s)", images["respgate"].expose, listen)
	}
	if images["respgate"].env["RESPGATE_LISTEN"] != listen || flagDefault(t, rgFlags, "listen") != listen {
		t.Errorf("RESPGATE_LISTEN: compose %q, image %q, built-in default %q; keep them equal",
			listen, images["respgate"].env["RESPGATE_LISTEN"], flagDefault(t, rgFlags, "listen"))
	}
	if !slices.Contains(images["vllm-sim"].expose, up.Port()) || flagDefault(t, simFlags, "listen") != ":"+up.Port() {
		t.Errorf("the vllm-sim image exposes %v and listens by default on %q; compose expects %s",
			images["vllm-sim"].expose, flagDefault(t, simFlags, "listen"), up.Port())
	}

	// Images and build targets.
	for name, target := range map[string]string{"respgate": "respgate", "vllm-sim": "vllm-sim", "respgate-fleet": "respgate", "vllm-fleet": "vllm-sim"} {
		b := mapAt(t, svc(name), "build")
		if b["context"] != "." || b["target"] != target {
			t.Errorf("%s build = %v, want context . and target %s", name, b, target)
		}
		df.stage(t, target)
		hc := health[name]
		if _, ok := images[target].files[hc[0]]; !ok {
			t.Errorf("%s healthcheck runs %s, which image %s does not contain", name, hc[0], target)
		}
	}
	if !slices.Equal(health["respgate"], images["respgate"].healthcheck) {
		t.Errorf("respgate healthcheck: compose %v, Dockerfile %v; keep them equal", health["respgate"], images["respgate"].healthcheck)
	}
	if !slices.Equal(health["vllm-sim"], images["vllm-sim"].healthcheck) {
		t.Errorf("vllm-sim healthcheck: compose %v, Dockerfile %v; keep them equal", health["vllm-sim"], images["vllm-sim"].healthcheck)
	}
	pgImage, _ := svc("postgres")["image"].(string)
	m := regexp.MustCompile(`^postgres:(\d+)(?:\.\d+)?(?:-alpine|-bookworm|-trixie)?$`).FindStringSubmatch(pgImage)
	if m == nil {
		t.Fatalf("postgres image %q: pin a major version", pgImage)
	}
	major, _ := strconv.Atoi(m[1])
	dataDir := "/var/lib/postgresql/data" // PGDATA of the official images up to 17
	if major >= 18 {
		dataDir = "/var/lib/postgresql" // 18 moved PGDATA to /var/lib/postgresql/18/docker
	}
	if vols := stringsAt(t, svc("postgres")["volumes"], "postgres.volumes"); !slices.Equal(vols, []string{"pgdata:" + dataDir}) {
		t.Errorf("postgres volumes %v: postgres:%d keeps its data under %s", vols, major, dataDir)
	}
	if img, _ := svc("vllm")["image"].(string); !regexp.MustCompile(`^vllm/vllm-openai:v\d+\.\d+\.\d+(-[a-z0-9]+)?$`).MatchString(img) {
		t.Errorf("vllm image %q: use the official vllm/vllm-openai image pinned to a release", img)
	}

	// vLLM: a reasoning model with its reasoning and tool parsers, a GPU, and the alternative.
	for _, flag := range []string{"--reasoning-parser=openai_gptoss", "--enable-auto-tool-choice", "--tool-call-parser=openai", "--host=0.0.0.0"} {
		if !slices.Contains(vllmCmd, flag) {
			t.Errorf("vllm command lacks %s", flag)
		}
	}
	if vllmCmd[0] != "openai/gpt-oss-20b" {
		t.Errorf("vllm serves %q first; the model goes first (vllm serve MODEL)", vllmCmd[0])
	}
	for _, alt := range []string{"# - Qwen/Qwen3-8B", "# - --reasoning-parser=qwen3", "# - --tool-call-parser=hermes"} {
		if !strings.Contains(raw, alt) {
			t.Errorf("the commented alternative model lacks %q", alt)
		}
	}
	devs := mapAt(t, svc("vllm"), "deploy", "resources", "reservations")["devices"].([]any)
	if gpu := devs[0].(map[string]any); gpu["driver"] != "nvidia" || !slices.Contains(stringsAt(t, gpu["capabilities"], "capabilities"), "gpu") {
		t.Errorf("vllm GPU reservation %v", gpu)
	}

	// Graceful stop: compose must wait longer than respgate drains.
	drain, err := time.ParseDuration(flagDefault(t, rgFlags, "shutdown-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	grace, err := time.ParseDuration(svc("respgate")["stop_grace_period"].(string))
	if err != nil || grace < drain+5*time.Second {
		t.Errorf("respgate stop_grace_period %v must exceed the shutdown timeout %v plus 5s (the HTTP server's own drain)", grace, drain)
	}
}

// composeStack is the compose file's sim profile, emulated without Docker: the binaries the
// Dockerfile builds, run with the command lines, environment (image ENV < env_file < environment)
// and healthchecks the compose file and the Dockerfile give them, against a real Postgres. Host
// names and ports are rewritten to loopback ports; nothing else is changed.
type composeStack struct {
	URLs    []string // each respgate replica's base URL (http://127.0.0.1:PORT)
	SimURL  string   // vllm-sim's base URL
	APIKey  string   // the first key of the env file
	DSN     string   // the Postgres the replicas share
	workdir string   // the checkout copy (deploy/respgate.env is created there)
	procs   []*process
}

type composeOpts struct {
	replicas int
	ports    []int             // host ports of the replicas (default: free ports)
	workdir  string            // the project directory (default: a fresh checkout copy with deploy/respgate.env)
	env      map[string]string // the variables the compose file is interpolated with (default: none)
}

func startComposeSim(t *testing.T, images map[string]*image, o composeOpts) *composeStack {
	t.Helper()
	if o.replicas == 0 {
		o.replicas = 1
	}
	doc := loadCompose(t, o.env)
	services := mapAt(t, doc, "services")
	st := &composeStack{DSN: pgtest.DSN(t), workdir: o.workdir}
	if st.workdir == "" {
		// A checkout after `cp deploy/respgate.env.example deploy/respgate.env`, as the docs say.
		st.workdir = contextCopy(t)
		example, err := os.ReadFile(filepath.Join(st.workdir, "deploy", "respgate.env.example"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(st.workdir, "deploy", "respgate.env"), example, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// postgres: the harness's server; its healthcheck is the compose file's, pointed at it.
	pg, err := url.Parse(st.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pgTest := stringsAt(t, mapAt(t, services, "postgres", "healthcheck")["test"], "postgres healthcheck")[1:]
	pgEnv := append(cleanEnv(), "PGHOST="+pg.Hostname(), "PGPORT="+pg.Port())
	if out, err := runCmd("", pgEnv, 30*time.Second, pgTest...); err != nil {
		t.Fatalf("postgres healthcheck %v: %v\n%s", pgTest, err, out)
	}

	// vllm-sim.
	simSvc := mapAt(t, services, "vllm-sim")
	simImg := images[mapAt(t, simSvc, "build")["target"].(string)]
	simPort := freePort(t)
	// Inside a container, ":8000", "127.0.0.1:8000" and "localhost:8000" are the container's own
	// port; "vllm:8000" is vllm-sim's (its network alias). Both become loopback ports here.
	own := func(port int) func(string) string {
		re := regexp.MustCompile(`(^|//)(|0\.0\.0\.0|127\.0\.0\.1|localhost|vllm|vllm-sim):(\d+)\b`)
		return func(s string) string {
			return re.ReplaceAllStringFunc(s, func(m string) string {
				sub := re.FindStringSubmatch(m)
				if sub[2] == "vllm" || sub[2] == "vllm-sim" {
					return sub[1] + "127.0.0.1:" + strconv.Itoa(simPort)
				}
				return sub[1] + "127.0.0.1:" + strconv.Itoa(port)
			})
		}
	}
	simArgs := stringsAt(t, simSvc["command"], "vllm-sim.command")
	for i := range simArgs {
		simArgs[i] = own(simPort)(simArgs[i])
	}
	simEnv := containerEnv(t, simImg, nil, serviceEnv(t, simSvc), own(simPort))
	sim := startProcess(t, "vllm-sim", t.TempDir(), simEnv, append([]string{simImg.local(t, simImg.entrypoint[0])}, simArgs...))
	st.procs = append(st.procs, sim)
	st.SimURL = "http://127.0.0.1:" + strconv.Itoa(simPort)
	waitHealthy(t, "vllm-sim", simImg, mapAt(t, simSvc, "healthcheck"), simEnv, own(simPort), sim)

	// respgate, once per replica.
	rgSvc := mapAt(t, services, "respgate")
	rgImg := images[mapAt(t, rgSvc, "build")["target"].(string)]
	fileEnv := map[string]string{}
	for _, f := range stringsAt(t, rgSvc["env_file"], "env_file") {
		for k, v := range parseEnvFileAt(t, filepath.Join(st.workdir, f)) {
			fileEnv[k] = v
		}
	}
	st.APIKey, _, _ = strings.Cut(fileEnv["RESPGATE_API_KEYS"], ",")
	compEnv := serviceEnv(t, rgSvc)
	upstream, _ := url.Parse(compEnv["RESPGATE_UPSTREAM_URL"])
	if upstream.Hostname() != "vllm" {
		t.Fatalf("upstream host %q: the emulation resolves only vllm (vllm-sim's alias)", upstream.Hostname())
	}
	if db, _ := url.Parse(compEnv["RESPGATE_DATABASE_URL"]); db.Hostname() != "postgres" {
		t.Fatalf("RESPGATE_DATABASE_URL does not point at the postgres service")
	}
	compEnv["RESPGATE_DATABASE_URL"] = st.DSN
	for i := 0; i < o.replicas; i++ {
		port := 0
		if i < len(o.ports) {
			port = o.ports[i]
		} else {
			port = freePort(t)
		}
		env := containerEnv(t, rgImg, fileEnv, compEnv, own(port))
		// The container is read_only: respgate gets a working directory it cannot write to.
		wd := filepath.Join(t.TempDir(), "var-lib-respgate")
		if err := os.Mkdir(wd, 0o555); err != nil {
			t.Fatal(err)
		}
		argv := append([]string{rgImg.local(t, rgImg.entrypoint[0])}, rgImg.cmd...)
		p := startProcess(t, fmt.Sprintf("respgate-%d", i+1), wd, env, argv)
		st.procs = append(st.procs, p)
		st.URLs = append(st.URLs, "http://127.0.0.1:"+strconv.Itoa(port))
		waitHealthy(t, p.name, rgImg, mapAt(t, rgSvc, "healthcheck"), env, own(port), p)
	}
	return st
}

// containerEnv is a container's environment: the image's ENV, then the env files, then the
// service's environment, each later one winning; addresses rewritten to loopback ports.
func containerEnv(t *testing.T, img *image, file, service map[string]string, rewrite func(string) string) []string {
	t.Helper()
	m := map[string]string{}
	for _, layer := range []map[string]string{img.env, file, service} {
		for k, v := range layer {
			m[k] = v
		}
	}
	env := cleanEnv()
	for _, k := range sortedKeys(m) {
		env = append(env, k+"="+rewrite(m[k]))
	}
	return env
}

// waitHealthy runs the service's healthcheck command (the compose file's, which must equal the
// image's) until it succeeds, as Docker does before a service_healthy dependency starts.
func waitHealthy(t *testing.T, name string, img *image, hc map[string]any, env []string, rewrite func(string) string, p *process) {
	t.Helper()
	test := stringsAt(t, hc["test"], name+" healthcheck")[1:]
	argv := []string{img.local(t, test[0])}
	for _, a := range test[1:] {
		argv = append(argv, rewrite(a))
	}
	waitUntil(t, 30*time.Second, name+" healthcheck", func() error {
		out, err := runCmd("", env, 10*time.Second, argv...)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}, p)
}

func (st *composeStack) client(base string) openai.Client {
	return openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey(st.APIKey), option.WithMaxRetries(0))
}

// simRequests returns the bodies vllm-sim received.
func (st *composeStack) simRequests(t *testing.T) []string {
	t.Helper()
	res, err := http.Get(st.SimURL + "/sim/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var reqs []struct {
		Method string `json:"method"`
		Body   string `json:"body"`
	}
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &reqs); err != nil {
		t.Fatalf("/sim/requests: %v: %s", err, b)
	}
	var out []string
	for _, r := range reqs {
		if r.Method == http.MethodPost {
			out = append(out, r.Body)
		}
	}
	return out
}

func streamText(t *testing.T, c openai.Client, p responses.ResponseNewParams) (*responses.Response, int) {
	t.Helper()
	s := c.Responses.NewStreaming(t.Context(), p)
	defer s.Close()
	var final *responses.Response
	n := 0
	for s.Next() {
		ev := s.Current()
		n++
		if ev.Type == "response.completed" {
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if final == nil {
		t.Fatalf("stream ended without response.completed after %d events", n)
	}
	return final, n
}

// checkComposeSimProfile is `docker compose --profile sim up`, emulated: the stack becomes healthy
// by its own healthchecks, answers a streamed request through vllm-sim with the env file's key,
// refuses other keys, and stops gracefully on SIGTERM.
func checkComposeSimProfile(t *testing.T, images map[string]*image) {
	// The env file the docs have users copy, with a drain deadline far beyond the grace stop
	// gives below: an idle respgate has nothing to drain, and one that waited for the deadline
	// anyway would be killed instead of stopping.
	workdir := contextCopy(t)
	example, err := os.ReadFile(filepath.Join(workdir, "deploy", "respgate.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(example, "\nRESPGATE_SHUTDOWN_TIMEOUT=1h\n"...)
	if err := os.WriteFile(filepath.Join(workdir, "deploy", "respgate.env"), env, 0o600); err != nil {
		t.Fatal(err)
	}
	st := startComposeSim(t, images, composeOpts{workdir: workdir})
	c := st.client(st.URLs[0])
	final, n := streamText(t, c, responses.ResponseNewParams{
		Model: "openai/gpt-oss-sim",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello! remember: the sky is green")},
	})
	if !strings.Contains(final.OutputText(), "Facts: the sky is green.") || n < 5 {
		t.Fatalf("streamed answer (%d events): %q", n, final.OutputText())
	}
	if reqs := st.simRequests(t); len(reqs) != 1 || !strings.Contains(reqs[0], `"store":false`) {
		t.Fatalf("vllm-sim received %d requests: %v", len(reqs), reqs)
	}
	bad := openai.NewClient(option.WithBaseURL(st.URLs[0]+"/v1"), option.WithAPIKey("not-a-configured-key"), option.WithMaxRetries(0))
	_, err = bad.Responses.Get(t.Context(), final.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a key outside RESPGATE_API_KEYS: %v, want 401", err)
	}
	rg := st.procs[len(st.procs)-1]
	if err := rg.stop(40 * time.Second); err != nil {
		t.Fatalf("an idle respgate on SIGTERM, with a 1h drain deadline: %v", err)
	}
	out := rg.out.String()
	if !strings.Contains(out, `"deadline":"1h0m0s"`) {
		t.Errorf("respgate did not drain with the env file's deadline:\n%s", tail(out, 2000))
	}
	if !strings.Contains(out, `"msg":"respgate stopped"`) || strings.Contains(out, "shutdown deadline reached") {
		t.Errorf("respgate did not log a clean stop:\n%s", tail(out, 2000))
	}
}

// checkReplicasShareOnePostgres runs the compose stack with respgate scaled to three replicas
// (docker compose up --scale respgate=3) and uses them the way a round-robin load balancer would:
// every turn on another replica. No state may live in one process only.
func checkReplicasShareOnePostgres(t *testing.T, images map[string]*image) {
	st := startComposeSim(t, images, composeOpts{replicas: 3})
	clients := []openai.Client{st.client(st.URLs[0]), st.client(st.URLs[1]), st.client(st.URLs[2])}

	// A previous_response_id chain, each turn on the next replica.
	first, _ := streamText(t, clients[0], responses.ResponseNewParams{Model: "openai/gpt-oss-sim",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember: cats purr")}})
	second, err := clients[1].Responses.New(t.Context(), responses.ResponseNewParams{Model: "openai/gpt-oss-sim",
		PreviousResponseID: openai.String(first.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("remember: dogs bark")}})
	if err != nil {
		t.Fatal(err)
	}
	third, _ := streamText(t, clients[2], responses.ResponseNewParams{Model: "openai/gpt-oss-sim",
		PreviousResponseID: openai.String(second.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("What do you know?")}})
	if got := third.OutputText(); !strings.Contains(got, "Facts: cats purr; dogs bark.") || !strings.Contains(got, "Seen 5 messages, 2 reasoning items") {
		t.Fatalf("third turn on a third replica did not see the whole chain: %q", got)
	}

	// Reads and deletes on any replica; a key is the same tenant everywhere (one server secret).
	for i, c := range clients {
		r, err := c.Responses.Get(t.Context(), second.ID, responses.ResponseGetParams{})
		if err != nil || r.ID != second.ID || r.Status != "completed" {
			t.Fatalf("replica %d: get %s: %v", i+1, second.ID, err)
		}
	}
	other := openai.NewClient(option.WithBaseURL(st.URLs[1]+"/v1"), option.WithAPIKey(st.APIKey+"-other"), option.WithMaxRetries(0))
	if _, err := other.Responses.Get(t.Context(), second.ID, responses.ResponseGetParams{}); err == nil {
		t.Fatal("a key outside RESPGATE_API_KEYS read a response")
	}

	// A conversation whose turns land on different replicas.
	conv, err := clients[2].Conversations.New(t.Context(), conversations.ConversationNewParams{})
	if err != nil {
		t.Fatal(err)
	}
	for i, fact := range []string{"remember: the sky is green", "remember: grass is blue", "What do you know?"} {
		_, err := clients[i].Responses.New(t.Context(), responses.ResponseNewParams{Model: "Qwen/Qwen3-sim",
			Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
			Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String(fact)}})
		if err != nil {
			t.Fatalf("conversation turn %d on replica %d: %v", i+1, i+1, err)
		}
	}
	items, err := clients[0].Conversations.Items.List(t.Context(), conv.ID, conversations.ItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(items.Data) < 6 {
		t.Fatalf("conversation has %d items after three turns on three replicas", len(items.Data))
	}
	last := st.simRequests(t)
	if body := last[len(last)-1]; !strings.Contains(body, "the sky is green") || !strings.Contains(body, "grass is blue") {
		t.Fatalf("the third conversation turn did not send the earlier turns upstream: %s", body)
	}
	if err := clients[1].Responses.Delete(t.Context(), first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[2].Responses.Get(t.Context(), first.ID, responses.ResponseGetParams{}); err == nil {
		t.Fatal("a response deleted on one replica is still readable on another")
	}
}
