package deploy

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestImages builds the Dockerfile's binaries once (its build stage's commands, on the build context
// .dockerignore leaves) and runs every check that needs them: the images themselves, the compose
// file against the code, the emulated compose stack, replicas, and the commands in the docs.
func TestImages(t *testing.T) {
	df, images := builtImages(t)
	t.Run("Dockerfile", func(t *testing.T) { checkDockerfile(t, df, images) })
	t.Run("Healthcheck", func(t *testing.T) { checkHealthcheck(t, images) })
	t.Run("ComposeFileAgainstTheCode", func(t *testing.T) { checkComposeAgainstTheCode(t, df, images) })
	t.Run("ComposeSimProfile", func(t *testing.T) { checkComposeSimProfile(t, images) })
	t.Run("ReplicasShareOnePostgres", func(t *testing.T) { checkReplicasShareOnePostgres(t, images) })
	t.Run("Docs", func(t *testing.T) { checkDocs(t, images) })
}

func checkDockerfile(t *testing.T, df *dockerfile, images map[string]*image) {
	// A `# syntax=` directive makes BuildKit pull its frontend image from a registry; without one
	// the engine's built-in frontend builds the file, offline too (make compose-test does).
	if m := regexp.MustCompile(`(?im)^#\s*syntax\s*=.*$`).FindString(readRepoFile(t, "Dockerfile")); m != "" {
		t.Errorf("Dockerfile: %q needs a registry to build; the built-in frontend has what the file uses", m)
	}
	goMod := readRepoFile(t, "go.mod")
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?$`).FindStringSubmatch(goMod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if df.args["GO_VERSION"] != m[1] {
		t.Errorf("Dockerfile GO_VERSION %q, go.mod says go %s", df.args["GO_VERSION"], m[1])
	}
	if base := df.expand(df.stage(t, "build").base); base != "golang:"+m[1] {
		t.Errorf("build stage base %q, want golang:%s", base, m[1])
	}
	var names []string
	for _, s := range df.stages {
		names = append(names, s.name)
	}
	if !slices.Equal(names, []string{"build", "vllm-sim", "respgate"}) {
		t.Fatalf("stages %v, want build, vllm-sim, respgate (respgate last: the default target)", names)
	}
	for _, name := range []string{"vllm-sim", "respgate"} {
		img, st := images[name], df.stage(t, name)
		if st.base != "gcr.io/distroless/static-debian12:nonroot" {
			t.Errorf("%s: base %q, want the distroless static nonroot image", name, st.base)
		}
		if !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(img.user) {
			t.Errorf("%s: USER %q, want a numeric non-root uid:gid (Kubernetes runAsNonRoot needs numbers)", name, img.user)
		}
		if len(img.entrypoint) != 1 {
			t.Errorf("%s: ENTRYPOINT %v, want one binary", name, img.entrypoint)
		}
		for path, local := range img.files {
			if !strings.HasPrefix(path, "/usr/local/bin/") {
				t.Errorf("%s: %s outside /usr/local/bin", name, path)
			}
			checkStatic(t, local)
		}
		img.local(t, img.entrypoint[0])
		img.local(t, img.healthcheck[0])
		for _, opt := range strings.Fields(img.healthOpts) {
			k, v, _ := strings.Cut(opt, "=")
			if _, err := time.ParseDuration(v); err != nil && k != "--retries" {
				t.Errorf("%s: HEALTHCHECK %s", name, opt)
			}
		}
	}
	rg := images["respgate"]
	if _, ok := rg.files["/usr/local/bin/vllm-sim"]; !ok {
		t.Error("the respgate image must carry vllm-sim too")
	}
	owned := false
	for _, in := range df.stage(t, "respgate").all("COPY") {
		if strings.Contains(in.args, "--chown="+rg.user) && strings.HasSuffix(in.args, " "+rg.workdir) {
			owned = true
		}
	}
	if rg.workdir == "" || !owned {
		t.Errorf("respgate's WORKDIR %q must be a directory owned by its user %s (the default SQLite store lives in ./data)", rg.workdir, rg.user)
	}
	if _, ok := rg.dirs[rg.workdir]; !ok {
		t.Errorf("respgate's WORKDIR %q is not copied from the build stage", rg.workdir)
	}
}

// checkHealthcheck runs the images' HEALTHCHECK commands against live and dead servers.
func checkHealthcheck(t *testing.T, images map[string]*image) {
	rg, sim := images["respgate"], images["vllm-sim"]
	probe := rg.local(t, rg.healthcheck[0])

	// Nothing listening: unhealthy.
	port := freePort(t)
	env := append(cleanEnv(), "RESPGATE_LISTEN=:"+strconv.Itoa(port))
	if out, err := runCmd("", env, 10*time.Second, probe); err == nil {
		t.Errorf("probe of a closed port succeeded: %s", out)
	}
	// A 503 (/readyz while the store is unreachable): unhealthy, and the reason is printed.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"store_unavailable"}}`))
	}))
	defer down.Close()
	if out, err := runCmd("", cleanEnv(), 10*time.Second, probe, down.URL+"/readyz"); err == nil || !strings.Contains(out, "503") {
		t.Errorf("probe of a 503: %v %s", err, out)
	}
	// respgate itself, configured only through RESPGATE_LISTEN as in the image (no arguments).
	work := t.TempDir()
	rgEnv := append(cleanEnv(), "RESPGATE_LISTEN=:"+strconv.Itoa(port), "RESPGATE_DATABASE_URL=sqlite:"+filepath.Join(work, "data", "respgate.db"))
	p := startProcess(t, "respgate", work, rgEnv, []string{rg.local(t, rg.entrypoint[0])})
	waitUntil(t, 30*time.Second, "respgate image HEALTHCHECK", func() error {
		_, err := runCmd("", rgEnv, 10*time.Second, append([]string{probe}, rg.healthcheck[1:]...)...)
		return err
	}, p)
	// vllm-sim with its image's CMD, probed by its image's HEALTHCHECK.
	simPort := freePort(t)
	args := slices.Clone(sim.cmd)
	for i := range args {
		args[i] = strings.ReplaceAll(args[i], ":8000", "127.0.0.1:"+strconv.Itoa(simPort))
	}
	s := startProcess(t, "vllm-sim", t.TempDir(), cleanEnv(), append([]string{sim.local(t, sim.entrypoint[0])}, args...))
	hc := slices.Clone(sim.healthcheck)
	hc[0] = sim.local(t, hc[0])
	for i := range hc {
		hc[i] = strings.ReplaceAll(hc[i], "127.0.0.1:8000", "127.0.0.1:"+strconv.Itoa(simPort))
	}
	waitUntil(t, 30*time.Second, "vllm-sim image HEALTHCHECK", func() error {
		_, err := runCmd("", cleanEnv(), 10*time.Second, hc...)
		return err
	}, s)
}
