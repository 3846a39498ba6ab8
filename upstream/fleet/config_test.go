package fleet

import (
	"strings"
	"testing"
	"time"
)

func TestParseTopology(t *testing.T) {
	src := `
pools:
  - name: big
    urls:
      - http://vllm-0:8000/v1
      - http://user:pw@vllm-1:8000/v1/
    models: ["openai/*"]
    api_key_env: BIG_KEY
    epsilon: 0.5
    min_slack: 0
  - name: small
    urls: [http://vllm-2:8000/v1]
    policy: least-loaded
health:
  interval: 2s
  max_backoff: 10s
  fall: 3
`
	top, err := ParseTopology([]byte(src), func(k string) string {
		if k == "BIG_KEY" {
			return "sk-planted"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Pools) != 2 {
		t.Fatalf("pools %+v", top.Pools)
	}
	big, small := top.Pools[0], top.Pools[1]
	if big.Name != "big" || len(big.URLs) != 2 || big.APIKey != "sk-planted" || big.Epsilon != 0.5 || big.MinSlack != 0 || big.Policy != PolicyChainAffine {
		t.Errorf("big %+v", big)
	}
	if small.Policy != PolicyLeastLoaded || small.Epsilon != DefaultEpsilon || small.MinSlack != DefaultMinSlack || len(small.Models) != 0 {
		t.Errorf("small %+v", small)
	}
	if h := top.Health; h.Interval != 2*time.Second || h.MaxBackoff != 10*time.Second || h.Fall != 3 || h.Timeout != 2*time.Second {
		t.Errorf("health %+v", h)
	}
	if s := big.String(); strings.Contains(s, "sk-planted") || strings.Contains(s, "pw") || !strings.Contains(s, "http://vllm-1:8000/v1") {
		t.Errorf("String leaks or loses: %s", s)
	}
}

func TestParseTopologyErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unknown key", "pools:\n  - name: a\n    urlz: [http://x/v1]\n", "[3:5] unknown field"},
		{"unknown top-level key", "pools:\n  - urls: [http://x/v1]\nretries: 3\n", "[3:1] unknown field"},
		{"bad URL", "pools:\n  - name: a\n    urls:\n      - http://ok/v1\n      - ftp://user:secret@x/v1\n", "line 5: $.pools[0].urls[1]: not an absolute http(s) base URL"},
		{"URL with a query", "pools:\n  - urls: ['http://x/v1?key=secret']\n", "line 2: $.pools[0].urls[0]"},
		{"no pools", "pools: []\n", "at least one pool"},
		{"no urls", "pools:\n  - name: a\n", "line 2: $.pools[0]: pool \"a\" has no urls"},
		{"duplicate pool", "pools:\n  - name: a\n    urls: [http://x/v1]\n  - name: a\n    urls: [http://y/v1]\n", "line 4: $.pools[1].name"},
		{"duplicate replica", "pools:\n  - urls: [http://x/v1]\n  - urls: ['http://x/v1/']\n", "line 3: $.pools[1].urls[0]: replica http://x/v1 is listed twice"},
		{"bad policy", "pools:\n  - urls: [http://x/v1]\n    policy: random\n", "line 3: $.pools[0].policy: unknown policy"},
		{"bad epsilon", "pools:\n  - urls: [http://x/v1]\n    epsilon: 0\n", "line 3: $.pools[0].epsilon"},
		{"negative min_slack", "pools:\n  - urls: [http://x/v1]\n    min_slack: -1\n", "line 3: $.pools[0].min_slack: min_slack must be in [0, 1000]"},
		{"min_slack too large", "pools:\n  - urls: [http://x/v1]\n    min_slack: 1001\n", "line 3: $.pools[0].min_slack"},
		{"bad pattern", "pools:\n  - urls: [http://x/v1]\n    models: ['[']\n", "line 3: $.pools[0].models[0]"},
		{"bad duration", "pools:\n  - urls: [http://x/v1]\nhealth:\n  interval: 5x\n", "line 4: $.health.interval"},
		{"key and env", "pools:\n  - urls: [http://x/v1]\n    api_key: a\n    api_key_env: B\n", "line 4: $.pools[0].api_key_env: set api_key or api_key_env"},
		{"empty env", "pools:\n  - urls: [http://x/v1]\n    api_key_env: UNSET\n", "environment variable UNSET is empty"},
		{"wrong type", "pools: 3\n", "[1:8]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopology([]byte(tc.src), func(string) string { return "" })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error quotes a credential: %v", err)
			}
		})
	}
}

func TestReplicaID(t *testing.T) {
	for in, want := range map[string]string{
		"http://vllm:8000/v1":       "http://vllm:8000/v1",
		"http://vllm:8000/v1/":      "http://vllm:8000/v1",
		"https://u:p@vllm:8000/v1":  "https://vllm:8000/v1",
		"http://vllm:8000/v1?x=1#f": "http://vllm:8000/v1",
		"http://[::1]:8000/v1":      "http://[::1]:8000/v1",
	} {
		if got := ReplicaID(in); got != want {
			t.Errorf("ReplicaID(%q) = %q, want %q", in, got, want)
		}
	}
	if got := healthURL("http://vllm:8000/v1/"); got != "http://vllm:8000/health" {
		t.Errorf("healthURL = %s", got)
	}
}

func TestMatchesStarMatchesEveryModel(t *testing.T) {
	if !matches([]string{"*"}, "openai/gpt-oss-120b") || !matches([]string{"openai/*"}, "openai/gpt-oss-120b") || matches([]string{"qwen*"}, "openai/x") {
		t.Error("pattern semantics changed")
	}
}

// A file without a health section gets the defaults; fall 0 is the default too; the limits of
// ε and min_slack are in range.
func TestParseTopologyDefaultsAndLimits(t *testing.T) {
	top, err := ParseTopology([]byte("pools:\n  - urls: [http://x/v1]\n    epsilon: 10\n    min_slack: 1000\nhealth:\n  fall: 0\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Health{Interval: 5 * time.Second, Timeout: 2 * time.Second, MinBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second, Fall: 2}
	if top.Health != want {
		t.Errorf("health %+v, want the defaults %+v", top.Health, want)
	}
	if p := top.Pools[0]; p.Epsilon != 10 || p.MinSlack != 1000 {
		t.Errorf("pool %+v, want epsilon 10 and min_slack 1000", p)
	}
	var h Health
	h.defaults()
	if h != want {
		t.Errorf("zero health with defaults %+v, want %+v", h, want)
	}
	for _, bad := range []string{"interval: 0s", "timeout: 0s", "fall: -1"} {
		if _, err := ParseTopology([]byte("pools:\n  - urls: [http://x/v1]\nhealth:\n  "+bad+"\n"), nil); err == nil {
			t.Errorf("health %q accepted", bad)
		}
	}
}

// A pool's String says whether it has a key, never the key.
func TestPoolStringRedactsTheKey(t *testing.T) {
	with := Pool{Name: "p", URLs: []string{"http://x/v1"}, APIKey: "sk-1"}.String()
	without := Pool{Name: "p", URLs: []string{"http://x/v1"}}.String()
	if !strings.Contains(with, "api_key=[redacted]") || strings.Contains(with, "sk-1") || strings.Contains(without, "api_key") {
		t.Errorf("with a key %q; without %q", with, without)
	}
}
