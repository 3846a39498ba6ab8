package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/respgate/respgate/internal/version"
)

// /metrics names the service (target_info, as traces do) and says which build runs (respgate_build_info, with the version the start-up line and
// --version print), and exports the swept-lease counter at 0 before any sweep, so an alert on its
// increase sees the first one.
func TestMetricsCarryTheBuildInfoAndAZeroSweepCounter(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	code, body := call(t, s, http.MethodGet, "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	bi := version.Get()
	if !strings.Contains(body, `target_info{service_name="respgate",service_version="`+bi.Version+`"`) {
		t.Errorf("target_info does not name the service respgate:\n%s", body)
	}
	var build, sweeps bool
	for l := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(l, "respgate_build_info{") && strings.Contains(l, `version="`+bi.Version+`"`) &&
			strings.Contains(l, `goversion="`+bi.GoVersion+`"`) && strings.HasSuffix(l, "} 1") {
			build = true
		}
		if strings.HasPrefix(l, "respgate_sweeper_failed_responses_total") && strings.HasSuffix(l, " 0") {
			sweeps = true
		}
	}
	if !build || !sweeps {
		t.Errorf("build_info line found: %v, zero sweeper counter found: %v\n%s", build, sweeps, body)
	}
}
