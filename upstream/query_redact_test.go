package upstream

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// A query value in the upstream URL (a proxy's ?api_key=…) is a secret: Config prints it
// redacted, and a relayed vLLM message that repeats it (or the URL) loses it.
func TestQueryValuesOfTheUpstreamURLAreRedacted(t *testing.T) {
	t.Parallel()
	base := "http://user:pw-SECRET@vllm.internal:8000/v1?api_key=QUERY-SECRET&tenant=abc-QVAL"
	cfg := Config{BaseURL: base}
	for _, out := range []string{cfg.String(), fmt.Sprint(cfg), fmt.Sprintf("%#v", cfg), logged(cfg)} {
		if strings.Contains(out, "QUERY-SECRET") || strings.Contains(out, "abc-QVAL") || strings.Contains(out, "pw-SECRET") {
			t.Errorf("Config printed a query value or password: %s", out)
		}
		if !strings.Contains(out, "api_key=REDACTED") {
			t.Errorf("Config does not show that the query was redacted: %s", out)
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r := newRedactor(u, "")
	for _, msg := range []string{
		"forwarding failed for http://vllm.internal:8000/v1?api_key=QUERY-SECRET&tenant=abc-QVAL: boom",
		"bad key QUERY-SECRET for tenant abc-QVAL",
	} {
		if got := r.clean(msg, 1024); strings.Contains(got, "QUERY-SECRET") || strings.Contains(got, "abc-QVAL") {
			t.Errorf("clean(%q) = %q", msg, got)
		}
	}
}
