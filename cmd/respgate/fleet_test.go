package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream/fleet"
	"github.com/respgate/respgate/upstream/vllmsim"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "upstreams.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// --upstreams builds the fleet the file describes; a file with an unknown key stops the start
// with an error naming its line.
func TestUpstreamsFileBuildsTheFleet(t *testing.T) {
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	defer sim.Close()
	st, err := sqlite.Open(t.Context(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))

	cfg := mustParse(t, []string{"--upstreams", writeFile(t, "pools:\n  - name: sim\n    urls: ["+sim.URL+"/v1]\n"), "--upstream-affinity-header", "x-session-id"}, nil)
	caller, fl, err := newUpstream(t.Context(), cfg, cfg.upstream, st, log)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if caller != fl {
		t.Fatal("the caller is not the fleet")
	}
	raw, err := caller.Models(t.Context())
	if err != nil || !strings.Contains(string(raw), vllmsim.HarmonyModel) {
		t.Fatalf("models %s, %v", raw, err)
	}

	cfg = mustParse(t, []string{"--upstreams", writeFile(t, "pools:\n  - name: sim\n    urls: ["+sim.URL+"/v1]\n    retries: 2\n")}, nil)
	if _, _, err := newUpstream(t.Context(), cfg, cfg.upstream, st, log); err == nil || !strings.Contains(err.Error(), "[4:5] unknown field \"retries\"") {
		t.Fatalf("error %v, want one naming line 4", err)
	}
}

func TestUpstreamsAndUpstreamURLExcludeEachOther(t *testing.T) {
	if _, err := parseConfig([]string{"--upstreams", "f.yaml", "--upstream-url", "http://x/v1"}, env(nil), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "not both") {
		t.Fatalf("error %v", err)
	}
	if _, err := parseConfig([]string{"--upstream-affinity-header", "Authorization"}, env(nil), io.Discard); err == nil {
		t.Fatal("Authorization accepted as the affinity header")
	}
}

// The compose fleet profile's file (docker-compose.yml mounts it) is a valid fleet.
func TestComposeFleetFileParses(t *testing.T) {
	b, err := os.ReadFile("../../deploy/upstreams.fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	top, err := fleet.ParseTopology(b, nil)
	if err != nil || len(top.Pools) != 1 || len(top.Pools[0].URLs) != 2 {
		t.Fatalf("topology %+v, %v", top, err)
	}
}
