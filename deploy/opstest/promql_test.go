package opstest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// series is what /metrics exported: each sample name with its label names and their values.
type series map[string]map[string]map[string]bool

// exported runs respgate as an operator does (the binary built from this checkout, on Postgres, its
// upstreams a fleet of two simulated vLLM replicas named in an --upstreams file), drives a few
// turns of every kind the dashboard watches, and returns the series its /metrics then exports:
// each sample name (histograms' _bucket, _sum and _count included) with its label names.
//
// One replica answers its health and model probes but fails every generation with a 503, so the
// turns whose key it is the first choice for fail over to the other: the replica's failures, the
// pool's failovers and the passive "down" marking are exported too, not only what a calm fleet shows.
func exported(t *testing.T) series {
	t.Helper()
	base := startRespgate(t, fleetFile(t))
	post := func(path, body string) []byte {
		t.Helper()
		return call(t, http.MethodPost, base+"/v1"+path, body)
	}
	var first struct{ ID string }
	if err := json.Unmarshal(post("/responses", `{"model":"openai/gpt-oss-sim","input":"remember: the sky is green"}`), &first); err != nil || first.ID == "" {
		t.Fatalf("first turn: %v", err)
	}
	post("/responses", `{"model":"openai/gpt-oss-sim","input":"and?","stream":true,"previous_response_id":"`+first.ID+`"}`)
	call(t, http.MethodGet, base+"/v1/responses/"+first.ID, "")
	var bg struct{ ID string }
	if err := json.Unmarshal(post("/responses", `{"model":"openai/gpt-oss-sim","input":"later","background":true}`), &bg); err != nil || bg.ID == "" {
		t.Fatalf("background turn: %v", err)
	}
	// Following the stream returns once the background turn ended.
	call(t, http.MethodGet, base+"/v1/responses/"+bg.ID+"?stream=true", "")
	chat := post("/chat/completions", `{"model":"openai/gpt-oss-sim","messages":[{"role":"user","content":"hi"}]}`)
	var cc struct {
		Choices []struct{ Message json.RawMessage }
	}
	if err := json.Unmarshal(chat, &cc); err != nil || len(cc.Choices) == 0 {
		t.Fatalf("chat turn: %v", err)
	}
	post("/chat/completions", `{"model":"openai/gpt-oss-sim","messages":[{"role":"user","content":"hi"},`+string(cc.Choices[0].Message)+`,{"role":"user","content":"more"}]}`)
	post("/responses/compact", `{"model":"openai/gpt-oss-sim","previous_response_id":"`+first.ID+`"}`)
	call(t, http.MethodGet, base+"/readyz", "")
	// Chains of their own (prompt_cache_key is a routing key) until one was first routed to the
	// failing replica and failed over: each does with probability ½, so 40 chains all missing it
	// is a 2⁻⁴⁰ chance.
	have := scrape(t, base)
	for i := 0; i < 40 && have["respgate_upstream_pool_failovers_total"] == nil; i++ {
		post("/responses", fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"hello","prompt_cache_key":"chain-%d"}`, i))
		have = scrape(t, base)
	}
	return have
}

// exportedCache holds what exported returned, for the tests that need it after the first.
var exportedCache series

// exportedOnce is exported, run once per test binary: the series are the same for every test, and
// starting respgate and driving its turns is the slow part. The respgate it started stops with
// the test that first called it.
func exportedOnce(t *testing.T) series {
	t.Helper()
	if exportedCache == nil {
		exportedCache = exported(t)
	}
	return exportedCache
}

// fleetFile writes an --upstreams file naming two simulated replicas in one chain-affine pool:
// one healthy, one answering its probes but failing every generation with a 503.
func fleetFile(t *testing.T) string {
	t.Helper()
	good := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	t.Cleanup(good.Close)
	sim := vllmsim.New(vllmsim.Options{})
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"ServiceUnavailableError","code":503}}`)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(bad.Close)
	path := filepath.Join(t.TempDir(), "upstreams.yaml")
	text := "pools:\n  - name: sim\n    urls: [" + good.URL + "/v1, " + bad.URL + "/v1]\n    policy: chain-affine\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startRespgate builds cmd/respgate from this checkout (the repository's own module, not this
// one's dependency versions), starts it on a loopback port with a Postgres schema of its own
// (internal/pgtest) and --upstreams upstreams, and returns its base URL (without /v1). It is stopped with
// SIGTERM and waited for in t.Cleanup.
func startRespgate(t *testing.T, upstreams string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "respgate")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/respgate")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/respgate: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--upstreams", upstreams)
	// Postgres, not SQLite: the Postgres store exports series SQLite has no use for (its
	// connection pool), which the dashboard and the alert rules use.
	cmd.Env = append(os.Environ(), "RESPGATE_DATABASE_URL="+pgtest.DSN(t))
	logs, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	drained := make(chan struct{})
	var tail []string
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(logs)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "respgate listening" {
				addr <- line.Addr
			}
			tail = append(tail[max(0, len(tail)-19):], sc.Text())
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-drained
		if err := cmd.Wait(); err != nil {
			t.Errorf("respgate: %v\n%s", err, strings.Join(tail, "\n"))
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case <-drained:
		t.Fatalf("respgate stopped before listening:\n%s", strings.Join(tail, "\n"))
	}
	return ""
}

// scrape reads base's /metrics into series.
func scrape(t *testing.T, base string) series {
	t.Helper()
	out := series{}
	sc := bufio.NewScanner(bytes.NewReader(call(t, http.MethodGet, base+"/metrics", "")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		labels := ""
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name)+1 {
			name, labels = line[:i], line[i+1:strings.LastIndexByte(line, '}')]
		}
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		for k, v := range splitLabels(labels) {
			if out[name][k] == nil {
				out[name][k] = map[string]bool{}
			}
			out[name][k][v] = true
		}
	}
	return out
}

// splitLabels returns the labels of a sample's {…} part (values unescaped only as far as the
// routes and statuses need: they hold no escapes).
func splitLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, v, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		i := 0
		for ; i < len(v); i++ {
			if v[i] == '\\' {
				i++
				continue
			}
			if v[i] == '"' {
				break
			}
		}
		out[strings.TrimPrefix(k, ",")] = v[:min(i, len(v))]
		s = strings.TrimPrefix(v[min(i+1, len(v)):], ",")
	}
	return out
}

func call(t *testing.T, method, url, body string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-dashboard")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return b
}

// exactLabels are the labels whose values an expression must spell as respgate does: every
// value it matches is exported after exported's turns.
var exactLabels = map[string]bool{"route": true, "op": true, "outcome": true}

// scrapeLabels are the labels Prometheus adds to every series it scrapes.
var scrapeLabels = map[string]bool{"job": true, "instance": true}

// check parses expr with the Prometheus parser and returns what is wrong with it against have:
// a name respgate does not export, a label its series lack, or an exact route or op that none of
// its series carries.
func check(expr string, have series) []error {
	p := parser.NewParser(parser.Options{})
	ast, err := p.ParseExpr(expr)
	if err != nil {
		return []error{fmt.Errorf("parse: %w", err)}
	}
	var errs []error
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		labels, ok := have[vs.Name]
		if vs.Name == "" || !ok {
			errs = append(errs, fmt.Errorf("%q is not a series respgate exports", vs.Name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" || scrapeLabels[m.Name] {
				continue
			}
			values, ok := labels[m.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s has no label %q", vs.Name, m.Name))
				continue
			}
			// An exact route, operation or routing outcome must be one respgate uses (statuses
			// vary by traffic).
			if exactLabels[m.Name] && !slices.ContainsFunc(slices.Collect(maps.Keys(values)), m.Matches) {
				errs = append(errs, fmt.Errorf("%s{%s} matches none of %v", vs.Name, m, slices.Sorted(maps.Keys(values))))
			}
		}
		return nil
	})
	return errs
}

// grafanaVars stands for what Grafana substitutes before a query reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__range", "3h", "$__interval", "15s", "$job", ".*")

// dashboardExprs returns every "expr" and templating query in a Grafana dashboard.
func dashboardExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(mustRead(t, path)), &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("%s: a dashboard needs a uid and a title", path)
	}
	out := map[string]string{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", path, p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", path, p.Title)
		}
		for _, tg := range p.Targets {
			out[p.Title+"/"+tg.RefID] = grafanaVars.Replace(tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			// label_values(METRIC, LABEL) is Grafana's, not PromQL: check its metric.
			s, _ := q["query"].(string)
			inner := strings.TrimSuffix(strings.TrimPrefix(s, "label_values("), ")")
			metric, _, _ := strings.Cut(inner, ",")
			out["variable "+v.Name] = strings.TrimSpace(metric)
		}
	}
	return out
}

// ruleExprs returns every rule's expression in a Prometheus rule file, decoded strictly.
func ruleExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, path)), &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: rule %q needs a name, a severity and a summary", path, r.Alert)
			}
			if _, dup := out[r.Alert]; dup {
				t.Errorf("%s: alert %q twice", path, r.Alert)
			}
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// TestDashboardAndAlertsNameOnlyExportedSeries scrapes a live respgate after a few turns of each
// kind and checks every expression of the dashboard and the alert rules against what it exported,
// so neither can drift from the code.
func TestDashboardAndAlertsNameOnlyExportedSeries(t *testing.T) {
	have := exportedOnce(t)
	for file, exprs := range map[string]map[string]string{
		"../grafana/respgate.json": dashboardExprs(t, "../grafana/respgate.json"),
		"../prometheus/alerts.yml": ruleExprs(t, "../prometheus/alerts.yml"),
	} {
		if len(exprs) < 8 {
			t.Errorf("%s: only %d expressions", file, len(exprs))
		}
		for _, name := range slices.Sorted(maps.Keys(exprs)) {
			for _, err := range check(exprs[name], have) {
				t.Errorf("%s: %s: %v\n  %s", file, name, err, exprs[name])
			}
		}
	}
	// The alerts the operator's guide promises.
	rules := ruleExprs(t, "../prometheus/alerts.yml")
	for _, want := range []string{"RespgateTurnsFailing", "RespgateStoreUnavailable", "RespgateBackgroundQueueOld", "RespgateReplicaDown",
		"RespgateLeasesSwept", "RespgateUpstreamReplicaDown", "RespgateUpstreamPoolDown"} {
		if rules[want] == "" {
			t.Errorf("alerts.yml lacks %s", want)
		}
	}
	// Every series of the fleet (upstream/fleet/metrics.go) has a panel.
	dash := dashboardExprs(t, "../grafana/respgate.json")
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if !strings.HasPrefix(name, "respgate_upstream_replica_") && !strings.HasPrefix(name, "respgate_upstream_pool_") &&
			name != "respgate_upstream_input_tokens_total" && name != "respgate_upstream_cached_tokens_total" {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Values(dash)), func(expr string) bool { return names(expr)[name] }) {
			t.Errorf("the dashboard has no panel for the fleet's %s", name)
		}
	}
	if have["respgate_upstream_replica_healthy"] == nil {
		t.Errorf("respgate with --upstreams exported no fleet series")
	}
}

// names returns the series names expr selects (nil if it does not parse).
func names(expr string) map[string]bool {
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out[vs.Name] = true
		}
		return nil
	})
	return out
}

// TestCheckCatchesDrift keeps the checks honest: a renamed series, a label it lacks, a route
// respgate does not serve, a misspelt routing outcome and a syntax error are each reported, in an
// expression (check) and in a synthetic series (checkSeries).
func TestCheckCatchesDrift(t *testing.T) {
	have := series{
		"respgate_http_requests_total":        {"route": {"/v1/responses": true}, "status": {"200": true}},
		"respgate_upstream_pool_routed_total": {"pool": {"sim": true}, "outcome": {"first_choice": true}},
	}
	for _, expr := range []string{
		`rate(respgate_http_request_total[5m])`,
		`rate(respgate_http_requests_total{code="500"}[5m])`,
		`rate(respgate_http_requests_total{route="/responses"}[5m])`,
		`rate(respgate_upstream_pool_routed_total{outcome="first-choice"}[5m])`,
		`sum(rate(respgate_http_requests_total[5m])`,
	} {
		if errs := check(expr, have); len(errs) == 0 {
			t.Errorf("%s: no error", expr)
		}
	}
	if errs := check(`sum by (route) (rate(respgate_http_requests_total{job="x",route=~"/v1/.*",status=~"5.."}[5m]))`, have); len(errs) > 0 {
		t.Errorf("a valid expression: %v", errs)
	}
	// The same for the synthetic series alerts_test.go feeds the rules.
	p := parser.NewParser(parser.Options{})
	for _, line := range []string{
		`respgate_http_request_total{route="/v1/responses"} 0+1x10`,
		`respgate_http_requests_total{code="500"} 0+1x10`,
		`respgate_http_requests_total{route="/responses"} 0+1x10`,
		`respgate_upstream_pool_routed_total{outcome="first-choice"} 0+1x10`,
		`respgate_http_requests_total{route="/v1/responses" 0+1x10`,
	} {
		if errs := checkSeries(p, line, have); len(errs) == 0 {
			t.Errorf("%s: no error", line)
		}
	}
	if errs := checkSeries(p, `respgate_http_requests_total{job="x",instance="y",route="/v1/responses",status="502"} 0x5 1+1x5`, have); len(errs) > 0 {
		t.Errorf("a valid series: %v", errs)
	}
}
