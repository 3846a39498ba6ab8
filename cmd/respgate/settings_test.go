package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/upstream"
)

// TestMain checks for leaked goroutines and stops the throwaway Postgres the admin tests may start.
func TestMain(m *testing.M) { pgtest.Main(m) }

var update = flag.Bool("update", false, "rewrite the respgate table of docs/configuration.md from the settings")

// env is a lookupEnv over a map.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func mustParse(t *testing.T, args []string, vars map[string]string) *config {
	t.Helper()
	c, err := parseConfig(args, env(vars), io.Discard)
	if err != nil {
		t.Fatalf("parseConfig(%q, %v): %v", args, vars, err)
	}
	return c
}

// docsTable renders the settings as docs/configuration.md's respgate table, from the flags the
// command really defines (so a flag added beside the table is caught too).
func docsTable(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	newFlagSet(&config{}, io.Discard).VisitAll(func(f *flag.Flag) {
		i := slices.IndexFunc(settings, func(s setting) bool { return s.flag == f.Name })
		if i < 0 {
			t.Errorf("--%s is defined outside the settings table (settings.go)", f.Name)
			return
		}
		s := settings[i]
		def := "empty"
		if s.def != "" {
			def = "`" + s.def + "`"
		}
		if strings.Contains(s.help, "|") {
			t.Errorf("--%s: help holds a |, which breaks the Markdown table", s.flag)
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", s.flag, envName(s.flag), def, s.help)
	})
	// VisitAll sorts by name; the docs keep the table's order.
	rows := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	body := rows[2:]
	slices.SortStableFunc(body, func(a, b string) int {
		return slices.IndexFunc(settings, func(s setting) bool { return strings.HasPrefix(a, "| `--"+s.flag+"`") }) -
			slices.IndexFunc(settings, func(s setting) bool { return strings.HasPrefix(b, "| `--"+s.flag+"`") })
	})
	return strings.Join(append(rows[:2], body...), "\n") + "\n"
}

// TestConfigurationDocsMatchSettings: docs/configuration.md's respgate table is exactly the
// settings table rendered (every flag, variable, default and meaning). `go test -update` rewrites it.
func TestConfigurationDocsMatchSettings(t *testing.T) {
	const path = "../../docs/configuration.md"
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	start := strings.Index(doc, "\n## respgate\n")
	if start < 0 {
		t.Fatal("docs/configuration.md has no \"## respgate\" section")
	}
	tableStart := strings.Index(doc[start:], "\n| flag |")
	if tableStart < 0 {
		t.Fatal("docs/configuration.md: the respgate section has no table")
	}
	tableStart += start + 1
	tableEnd := tableStart
	for tableEnd < len(doc) && doc[tableEnd] == '|' {
		tableEnd += strings.Index(doc[tableEnd:], "\n") + 1
	}
	got, want := doc[tableStart:tableEnd], docsTable(t)
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:tableStart]+want+doc[tableEnd:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	gotRows, wantRows := strings.Split(got, "\n"), strings.Split(want, "\n")
	for _, r := range wantRows {
		if !slices.Contains(gotRows, r) {
			t.Errorf("docs/configuration.md lacks the row\n%s", r)
		}
	}
	for _, r := range gotRows {
		if !slices.Contains(wantRows, r) {
			t.Errorf("docs/configuration.md has a row no setting renders\n%s", r)
		}
	}
	t.Errorf("docs/configuration.md's respgate table differs from the settings (rows in another order?); run go test ./cmd/respgate -run TestConfigurationDocsMatchSettings -update")
}

// otherValue is a valid value of s that differs from its default.
func otherValue(s setting) string {
	if s.example != "" {
		return s.example
	}
	switch s.bind(&config{}).(type) {
	case *string:
		if s.oneOf != nil {
			return s.oneOf[(slices.Index(s.oneOf, s.def)+1)%len(s.oneOf)]
		}
		return s.def + "x"
	case *time.Duration:
		d, _ := time.ParseDuration(s.def)
		return (d + time.Second).String()
	default:
		n, _ := strconv.Atoi(s.def)
		return strconv.Itoa(n + 7)
	}
}

func TestEverySettingHasAnEnvironmentVariableTheFlagOverrides(t *testing.T) {
	for _, s := range settings {
		t.Run(s.flag, func(t *testing.T) {
			v := otherValue(s)
			c := mustParse(t, nil, map[string]string{envName(s.flag): v})
			if got := c.flags.Lookup(s.flag).Value.String(); got != v {
				t.Errorf("%s=%s gave --%s %q", envName(s.flag), v, s.flag, got)
			}
			c = mustParse(t, []string{"--" + s.flag + "=" + v}, map[string]string{envName(s.flag): s.def})
			if got := c.flags.Lookup(s.flag).Value.String(); got != v {
				t.Errorf("--%s=%s under %s=%s gave %q; the flag must win", s.flag, v, envName(s.flag), s.def, got)
			}
		})
	}
}

func TestDefaultsReachTheServerAndUpstreamConfig(t *testing.T) {
	c := mustParse(t, nil, nil)
	if c.server.SyncTimeout != 10*time.Minute || c.server.WriteTimeout != 30*time.Second ||
		c.server.MaxOutputItems != 4096 || c.upstream.MaxEventBytes != 16<<20 || c.upstream.IdleTimeout != time.Minute {
		t.Errorf("defaults not bound: server %+v upstream %v", c.server, c.upstream)
	}
	c = mustParse(t, []string{"--sync-timeout", "90s", "--max-json-depth", "9", "--api-keys", "a, b,,c", "--tool-policy", "reject"}, nil)
	if c.server.SyncTimeout != 90*time.Second || c.server.MaxJSONDepth != 9 ||
		!slices.Equal(c.server.APIKeys, []string{"a", "b", "c"}) || c.server.ToolPolicy != "reject" {
		t.Errorf("flags not bound: %+v", c.server)
	}
}

func TestMalformedEnvironmentValueIsAStartupError(t *testing.T) {
	for name, v := range map[string]string{
		"RESPGATE_LEASE_TTL":      "sixty",
		"RESPGATE_MAX_BODY_BYTES": "32MiB",
		"RESPGATE_SYNC_TIMEOUT":   "10",
	} {
		_, err := parseConfig(nil, env(map[string]string{name: v}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v, want one naming the variable", name, v, err)
		}
	}
}

func TestNegativeOrMeaninglessZeroValuesAreRejected(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--lease-ttl", "-5s"}, want: "--lease-ttl (RESPGATE_LEASE_TTL) must not be negative, got -5s"},
		{env: map[string]string{"RESPGATE_LEASE_TTL": "-5s"}, want: "--lease-ttl (RESPGATE_LEASE_TTL) must not be negative"},
		{args: []string{"--sync-timeout", "0"}, want: "--sync-timeout (RESPGATE_SYNC_TIMEOUT) must be positive, got 0s"},
		{args: []string{"--max-body-bytes", "-1"}, want: "--max-body-bytes (RESPGATE_MAX_BODY_BYTES) must not be negative"},
		{args: []string{"--max-streams", "-1"}, want: "--max-streams (RESPGATE_MAX_STREAMS) must not be negative"},
		{args: []string{"--retention", "-1h"}, want: "--retention (RESPGATE_RETENTION) must not be negative"},
		{args: []string{"--upstream-max-event-bytes", "0"}, want: "--upstream-max-event-bytes (RESPGATE_UPSTREAM_MAX_EVENT_BYTES) must be positive"},
		{args: []string{"--max-output-bytes", "-1"}, want: "--max-output-bytes (RESPGATE_MAX_OUTPUT_BYTES) must not be negative"},
		{args: []string{"--tool-policy", "allow"}, want: "--tool-policy (RESPGATE_TOOL_POLICY) must be one of drop, reject"},
		{args: []string{"--log-level", "verbose"}, want: "--log-level (RESPGATE_LOG_LEVEL) must be one of debug, info, warn, error"},
	} {
		_, err := parseConfig(tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: error %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
	// Where 0 means something (help says what), it is accepted.
	mustParse(t, []string{"--retention", "0", "--max-streams", "0", "--max-body-bytes-in-flight", "0", "--max-output-bytes", "0"}, nil)
}

func TestLeaseMustOutliveTheWriteTimeout(t *testing.T) {
	for _, args := range [][]string{
		{"--lease-ttl", "30s"}, // the default write timeout
		{"--lease-ttl", "1m", "--write-timeout", "2m"},
	} {
		_, err := parseConfig(args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--lease-ttl") || !strings.Contains(err.Error(), "must be longer than --write-timeout") {
			t.Errorf("%v: error %v, want the lease rejected", args, err)
		}
	}
	mustParse(t, []string{"--lease-ttl", "31s", "--write-timeout", "30s"}, nil)
}

func TestCommitMustEndBeforeTheLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string // the whole error; "" accepted
	}{
		{name: "defaults (15s under 1m)"},
		{name: "just under", args: []string{"--commit-timeout", "59s"}},
		{name: "a short lease with a shorter commit", args: []string{"--lease-ttl", "10s", "--write-timeout", "5s", "--commit-timeout", "9s"}},
		{name: "equal to the default lease", args: []string{"--commit-timeout", "1m"},
			want: "--commit-timeout (RESPGATE_COMMIT_TIMEOUT) is 1m0s but must be less than --lease-ttl (RESPGATE_LEASE_TTL), 1m0s: lower the first or raise the second, so a commit cannot outlast its lease and find its response swept"},
		{name: "longer, from the environment", env: map[string]string{"RESPGATE_COMMIT_TIMEOUT": "2m", "RESPGATE_LEASE_TTL": "90s"},
			want: "--commit-timeout (RESPGATE_COMMIT_TIMEOUT) is 2m0s but must be less than --lease-ttl (RESPGATE_LEASE_TTL), 1m30s: lower the first or raise the second, so a commit cannot outlast its lease and find its response swept"},
		{name: "a lease lowered under the default commit", args: []string{"--lease-ttl", "10s", "--write-timeout", "5s"},
			want: "--commit-timeout (RESPGATE_COMMIT_TIMEOUT) is 15s but must be less than --lease-ttl (RESPGATE_LEASE_TTL), 10s: lower the first or raise the second, so a commit cannot outlast its lease and find its response swept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, env(tc.env), io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%v %v: %v, want accepted", tc.args, tc.env, err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("%v %v: error %v\nwant %s", tc.args, tc.env, err, tc.want)
			}
		})
	}
}

func TestStartupLogListsEverySettingWithoutSecrets(t *testing.T) {
	const secret = "sk-CANARY-7f3a"
	c := mustParse(t, nil, map[string]string{
		"RESPGATE_UPSTREAM_API_KEY": secret,
		"RESPGATE_API_KEYS":         "key-one," + secret,
		"RESPGATE_DATABASE_URL":     "postgres://respgate:" + secret + "@db:5432/respgate?sslmode=disable&sslpassword=" + secret,
		"RESPGATE_UPSTREAM_URL":     "http://user:" + secret + "@vllm:8000/v1",
	})
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("respgate starting", c.logAttrs()...)
	if strings.Contains(buf.String(), "CANARY") {
		t.Fatalf("a secret reached the log:\n%s", buf.String())
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		_, plain := line[logKey(s.flag)]
		_, set := line[logKey(s.flag)+"_set"]
		if !plain && !set {
			t.Errorf("the start-up log lacks --%s:\n%s", s.flag, buf.String())
		}
	}
	if line["api_keys"] != 2.0 || line["upstream_api_key_set"] != true || line["sync_timeout"] != "10m0s" {
		t.Errorf("start-up log: %s", buf.String())
	}
	if got := line["database_url"]; got != "postgres://respgate:REDACTED@db:5432/respgate?sslmode=disable&sslpassword=REDACTED" {
		t.Errorf("database_url logged as %q", got)
	}
}

// malformedSecrets are passwords that break a URL unless percent-encoded, each with the secret on
// both sides of the character, so a partial leak shows too.
var malformedSecrets = func() []string {
	var out []string
	for _, c := range []string{"%", "#", "?", "/", " ", "[", "@", ":"} {
		out = append(out, "SECRETLEFT"+c+"SECRETRIGHT")
	}
	return out
}()

func leaks(s string) bool {
	return strings.Contains(s, "SECRETLEFT") || strings.Contains(s, "SECRETRIGHT")
}

func TestRedactURLNeverShowsAPassword(t *testing.T) {
	for _, pw := range malformedSecrets {
		for _, u := range []string{
			"postgres://respgate:" + pw + "@db:5432/respgate",
			"postgresql://respgate:" + pw + "@db/respgate?sslmode=require",
			"http://user:" + pw + "@vllm:8000/v1",
			"postgres://db/respgate?password=" + pw,
			"postgres:respgate:" + pw + "@db",
			"host=db password=" + pw,
		} {
			if got := redactURL(u); leaks(got) {
				t.Errorf("redactURL(%q) = %q", u, got)
			}
		}
	}
	for in, want := range map[string]string{
		"postgres://u:p%zz@h/db":    "postgres://<unparseable, redacted>",
		"sqlite:./data/respgate.db": "sqlite:./data/respgate.db",
		"sqlite::memory:":           "sqlite::memory:",
		"http://vllm:8000/v1":       "http://vllm:8000/v1",
		"":                          "",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStartupOutputNeverShowsAPassword runs the command with each malformed password in the
// database URL and in the upstream URL: nothing it prints (logs, -h, the error main prints) holds
// any part of the secret.
func TestStartupOutputNeverShowsAPassword(t *testing.T) {
	for _, pw := range malformedSecrets {
		for _, vars := range []map[string]string{
			{"RESPGATE_DATABASE_URL": "postgres://respgate:" + pw + "@127.0.0.1:1/respgate"},
			{"RESPGATE_DATABASE_URL": "sqlite::memory:", "RESPGATE_UPSTREAM_URL": "http://user:" + pw + "@127.0.0.1:1/v1"},
			{"RESPGATE_DATABASE_URL": "sqlite::memory:", "RESPGATE_UPSTREAM_URL": "http://127.0.0.1:1/v1?api_key=" + url.QueryEscape(pw)},
			{"RESPGATE_DATABASE_URL": "sqlite::memory:", "RESPGATE_UPSTREAM_URL": "http://127.0.0.1:1/v1?key=SECRETLEFT-SECRETRIGHT"},
		} {
			// An ended context: the forms that are valid URLs start and stop at once.
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			var out bytes.Buffer
			err := run(ctx, []string{"--listen", "127.0.0.1:0"}, env(vars), &out)
			if !strings.Contains(out.String(), `"msg":"respgate starting"`) && err == nil {
				t.Errorf("%v: neither a start-up line nor an error:\n%s", vars, out.String())
			}
			if leaks(out.String()) || (err != nil && leaks(err.Error())) {
				t.Errorf("%v: the password leaked:\n%s\nrespgate: %v", vars, out.String(), err)
			}
		}
	}
}

// The upstream URL's query values are all redacted (a proxy's ?api_key=…), its password too.
func TestRedactUpstreamURLHidesQueryValues(t *testing.T) {
	for in, want := range map[string]string{
		"http://vllm:8000/v1?api_key=SECRETLEFT":        "http://vllm:8000/v1?api_key=REDACTED",
		"http://u:SECRETLEFT@vllm/v1?a=SECRETRIGHT&b=1": "http://u:REDACTED@vllm/v1?a=REDACTED&b=REDACTED",
		"http://vllm:8000/v1":                           "http://vllm:8000/v1",
		"":                                              "",
	} {
		if got := redactUpstreamURL(in); got != want {
			t.Errorf("redactUpstreamURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnparseableDatabaseURLIsAStartupErrorThatSaysWhy(t *testing.T) {
	_, err := parseConfig(nil, env(map[string]string{"RESPGATE_DATABASE_URL": "postgres://u:SECRETLEFT%SECRETRIGHT@db/x"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "percent-encode") || leaks(err.Error()) {
		t.Errorf("error %v", err)
	}
}

func TestHelpListsEverySettingWithItsVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, env(nil), &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if !strings.Contains(out.String(), "  -"+s.flag+" ") || !strings.Contains(out.String(), "("+envName(s.flag)+")") {
			t.Errorf("-h lacks --%s or %s", s.flag, envName(s.flag))
		}
	}
	if strings.Contains(out.String(), "`") {
		t.Errorf("-h shows Markdown quotes:\n%s", out.String())
	}
}

// TestHelpShowsThePackagesOwnDefaults: the upstream and accumulator rows take their defaults
// from those packages' exported defaults, so -h shows what the packages apply when a setting is
// left at its default (a default hard-coded here once said 2m where upstream applied 60s).
func TestHelpShowsThePackagesOwnDefaults(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, env(nil), &out); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"upstream-connect-timeout": upstream.DefaultConnectTimeout.String(),
		"upstream-idle-timeout":    upstream.DefaultIdleTimeout.String(),
		"upstream-max-event-bytes": strconv.Itoa(upstream.DefaultMaxEventBytes),
		"max-output-items":         strconv.Itoa(accumulator.DefaultMaxItems),
		"max-output-item-bytes":    strconv.Itoa(accumulator.DefaultMaxItemBytes),
	} {
		f := newFlagSet(&config{}, io.Discard).Lookup(name)
		if f == nil {
			t.Errorf("no --%s", name)
			continue
		}
		// DefValue is the default as the flag parsed it, in its own form (1m0s for a minute),
		// which is what flag.PrintDefaults shows.
		if f.DefValue != want {
			t.Errorf("--%s defaults to %s, want the package default %s", name, f.DefValue, want)
		}
		if !helpLineHasDefault(out.String(), name, want) {
			t.Errorf("-h of --%s does not show the default %s:\n%s", name, want, out.String())
		}
	}
}

// helpLineHasDefault reports whether the -h entry of flag name says "(default def)".
func helpLineHasDefault(help, name, def string) bool {
	_, entry, ok := strings.Cut(help, "  -"+name+" ")
	if !ok {
		return false
	}
	// The entry ends where the next flag's begins.
	if i := strings.Index(entry, "\n  -"); i >= 0 {
		entry = entry[:i]
	}
	return strings.Contains(entry, "(default "+def+")")
}

// An unquoted value with a space leaves the rest of it as an argument; it may be part of a secret.
func TestStrayArgumentIsAStartupErrorThatDoesNotEchoIt(t *testing.T) {
	_, err := parseConfig([]string{"--api-keys", "key-one", "SECRETRIGHT"}, env(nil), io.Discard)
	if err == nil || leaks(err.Error()) || !strings.Contains(err.Error(), "only flags") {
		t.Errorf("error %v", err)
	}
}

func TestServerSettingsDefaultToTheServersOwnDefaults(t *testing.T) {
	c, d := mustParse(t, nil, nil).server, server.DefaultConfig()
	if c.KeepAlive != d.KeepAlive || c.SyncTimeout != d.SyncTimeout || c.CommitTimeout != d.CommitTimeout ||
		c.WriteTimeout != d.WriteTimeout || c.BodyReadTimeout != d.BodyReadTimeout || c.LeaseTTL != d.LeaseTTL ||
		c.SweepInterval != d.SweepInterval || c.MaxBodyBytes != d.MaxBodyBytes || c.MaxHeaderBytes != d.MaxHeaderBytes ||
		c.MaxInputItems != d.MaxInputItems || c.MaxJSONDepth != d.MaxJSONDepth {
		t.Errorf("flag defaults %+v differ from the server's %+v", c, d)
	}
	for d, want := range map[time.Duration]string{time.Minute: "1m", 10 * time.Minute: "10m", 30 * time.Second: "30s", 2 * time.Hour: "2h", 90 * time.Second: "1m30s"} {
		if got := durDef(d); got != want {
			t.Errorf("durDef(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestSealKeysReachTheServerAndNeverThePrintedOutput: RESPGATE_SEAL_KEYS (or its file) becomes
// the server's key ring settings; the start-up log shows the key ids only, and a malformed entry
// is a start-up error that does not quote it.
func TestSealKeysReachTheServerAndNeverThePrintedOutput(t *testing.T) {
	secret := base64.StdEncoding.EncodeToString([]byte("CANARYCANARYCANARYCANARYCANARY!!"))
	spec := "k2:" + secret + ",k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + ",k0:retired"
	c := mustParse(t, nil, map[string]string{"RESPGATE_SEAL_KEYS": spec})
	if len(c.server.SealKeys) != 2 || c.server.SealKeys[0].ID != "k2" || !slices.Equal(c.server.SealRetired, []string{"k0"}) {
		t.Fatalf("seal keys not bound: %v retired %v", c.server.SealKeys, c.server.SealRetired)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("respgate starting", c.logAttrs()...)
	fmt.Fprintf(&buf, "%v %+v", c.server, c.server.SealKeys)
	if strings.Contains(buf.String(), secret) || strings.Contains(buf.String(), "CANARY") {
		t.Fatalf("a seal key reached the output:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), `"seal_keys":"k2,k1,k0 (retired)"`) {
		t.Errorf("the start-up log does not list the key ids:\n%s", buf.String())
	}

	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte("# current first\n"+strings.ReplaceAll(spec, ",", "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c = mustParse(t, []string{"--seal-keys-file", file}, nil)
	if len(c.server.SealKeys) != 2 || c.server.SealKeys[1].ID != "k1" {
		t.Fatalf("keys from the file: %v", c.server.SealKeys)
	}

	for _, bad := range []map[string]string{
		{"RESPGATE_SEAL_KEYS": "k1:" + base64.StdEncoding.EncodeToString([]byte("CANARY-too-short"))},
		{"RESPGATE_SEAL_KEYS": "CANARY"},
		{"RESPGATE_SEAL_KEYS": spec, "RESPGATE_SEAL_KEYS_FILE": file},
		{"RESPGATE_SEAL_KEYS": "k0:retired"},
		{"RESPGATE_REASONING_CONTEXT": "gpt-*=some_turns"},
	} {
		_, err := parseConfig(nil, env(bad), io.Discard)
		if err == nil || strings.Contains(err.Error(), "CANARY") {
			t.Errorf("%v: error %v, want one that does not quote the key", bad, err)
		}
	}
}
