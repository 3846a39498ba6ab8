package fleet

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Pool is one pool of vLLM replicas serving the same models.
type Pool struct {
	// Name names the pool in metrics and logs; unique in a Config.
	Name string
	// URLs are the replicas' base URLs including /v1 (http://host:8000/v1). A replica's
	// identity (ReplicaID) is its URL without credentials, query or fragment.
	URLs []string
	// Models are path.Match patterns of the model names the pool serves ("*" alone: every
	// model). Empty: the models its replicas list at /v1/models.
	Models []string
	// APIKey is sent to every replica of the pool as "Authorization: Bearer".
	APIKey string
	// Policy picks the replica of each call.
	Policy Policy
	// Epsilon is PolicyChainAffine's load slack (DefaultEpsilon when 0), and MinSlack the least
	// slack in calls above the mean (Bound; the file's default is DefaultMinSlack).
	Epsilon  float64
	MinSlack int
}

// String prints the pool without its API key or URL credentials.
func (p Pool) String() string {
	ids := make([]string, len(p.URLs))
	for i, u := range p.URLs {
		ids[i] = ReplicaID(u)
	}
	key := ""
	if p.APIKey != "" {
		key = " api_key=[redacted]"
	}
	return fmt.Sprintf("pool %s: %s policy=%s epsilon=%g min_slack=%d models=%q%s", p.Name, strings.Join(ids, ","), p.Policy, p.Epsilon, p.MinSlack, p.Models, key)
}

// Health configures the active probes of every replica's /health.
type Health struct {
	// Interval is the time between probes of a healthy replica. Default 5s.
	Interval time.Duration
	// Timeout bounds one probe. Default 2s.
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the time between probes of an unhealthy replica, which
	// doubles from MinBackoff after each failed probe. Defaults 500ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Fall is how many failed probes in a row mark a healthy replica down. Default 2. A
	// connection failure or 5xx of a real call marks it down at once (passive marking).
	Fall int
}

func (h *Health) defaults() {
	if h.Interval <= 0 {
		h.Interval = 5 * time.Second
	}
	if h.Timeout <= 0 {
		h.Timeout = 2 * time.Second
	}
	if h.MinBackoff <= 0 {
		h.MinBackoff = 500 * time.Millisecond
	}
	if h.MaxBackoff <= 0 {
		h.MaxBackoff = 30 * time.Second
	}
	h.MaxBackoff = max(h.MaxBackoff, h.MinBackoff)
	if h.Fall <= 0 {
		h.Fall = 2
	}
}

// Topology is the fleet a configuration file describes: its pools and the probes.
type Topology struct {
	Pools  []Pool
	Health Health
}

// The configuration file's shape (docs/fleet.md, "Configuration"). Leaves are strings where the
// file's text needs checking, so every error can name its line.
type fileTopology struct {
	Pools  []filePool  `yaml:"pools"`
	Health *fileHealth `yaml:"health"`
}

type filePool struct {
	Name      string   `yaml:"name"`
	URLs      []string `yaml:"urls"`
	Models    []string `yaml:"models"`
	APIKey    string   `yaml:"api_key"`
	APIKeyEnv string   `yaml:"api_key_env"`
	Policy    string   `yaml:"policy"`
	Epsilon   *float64 `yaml:"epsilon"`
	MinSlack  *int     `yaml:"min_slack"`
}

type fileHealth struct {
	Interval   string `yaml:"interval"`
	Timeout    string `yaml:"timeout"`
	MinBackoff string `yaml:"min_backoff"`
	MaxBackoff string `yaml:"max_backoff"`
	Fall       int    `yaml:"fall"`
}

// ParseTopology reads a fleet configuration file (YAML) strictly: an unknown key, a value of the
// wrong type, a URL that is not an absolute http(s) base URL, an unknown policy, a duplicate
// pool name or replica, a bad pattern or duration is an error that names its line. getenv
// reads api_key_env (os.Getenv; nil reads nothing). Errors never quote an API key or a URL's
// credentials.
func ParseTopology(src []byte, getenv func(string) string) (Topology, error) {
	var f fileTopology
	if err := yaml.UnmarshalWithOptions(src, &f, yaml.Strict()); err != nil {
		return Topology{}, fmt.Errorf("upstreams: %s", yaml.FormatError(err, false, false))
	}
	file, err := parser.ParseBytes(src, 0)
	if err != nil {
		return Topology{}, fmt.Errorf("upstreams: %s", yaml.FormatError(err, false, false))
	}
	at := func(p string, format string, args ...any) error {
		line := lineOf(file, p)
		msg := fmt.Sprintf(format, args...)
		if line > 0 {
			return fmt.Errorf("upstreams: line %d: %s: %s", line, p, msg)
		}
		return fmt.Errorf("upstreams: %s: %s", p, msg)
	}
	var t Topology
	if len(f.Pools) == 0 {
		return Topology{}, at("$.pools", "at least one pool is needed")
	}
	seen := poolsSeen{names: map[string]bool{}, replicas: map[string]string{}}
	for i, fp := range f.Pools {
		p, err := seen.pool(i, fp, getenv, at)
		if err != nil {
			return Topology{}, err
		}
		t.Pools = append(t.Pools, p)
	}
	if h := f.Health; h != nil {
		if err := parseHealth(h, &t.Health, at); err != nil {
			return Topology{}, err
		}
	}
	t.Health.defaults()
	return t, nil
}

// lineError is ParseTopology's error at a path of the file, naming its line.
type lineError func(path string, format string, args ...any) error

// poolsSeen is what the pools read so far took: names, and replica ids with their pool.
type poolsSeen struct {
	names    map[string]bool
	replicas map[string]string
}

// pool checks and reads the i-th pool of the file.
func (seen poolsSeen) pool(i int, fp filePool, getenv func(string) string, at lineError) (Pool, error) {
	here := fmt.Sprintf("$.pools[%d]", i)
	p := Pool{Name: fp.Name, Models: fp.Models, APIKey: fp.APIKey}
	if p.Name == "" {
		p.Name = fmt.Sprintf("pool%d", i)
	}
	if seen.names[p.Name] {
		return Pool{}, at(here+".name", "pool name %q is used twice", p.Name)
	}
	seen.names[p.Name] = true
	if len(fp.URLs) == 0 {
		return Pool{}, at(here, "pool %q has no urls", p.Name)
	}
	for k, u := range fp.URLs {
		if err := checkURL(u); err != nil {
			return Pool{}, at(fmt.Sprintf("%s.urls[%d]", here, k), "%v", err)
		}
		id := ReplicaID(u)
		if other, dup := seen.replicas[id]; dup {
			return Pool{}, at(fmt.Sprintf("%s.urls[%d]", here, k), "replica %s is listed twice (also in pool %q)", id, other)
		}
		seen.replicas[id] = p.Name
		p.URLs = append(p.URLs, u)
	}
	for k, m := range fp.Models {
		if _, err := path.Match(m, ""); err != nil || m == "" {
			return Pool{}, at(fmt.Sprintf("%s.models[%d]", here, k), "not a model name or path.Match pattern")
		}
	}
	if fp.APIKeyEnv != "" {
		if fp.APIKey != "" {
			return Pool{}, at(here+".api_key_env", "set api_key or api_key_env, not both")
		}
		if getenv != nil {
			p.APIKey = getenv(fp.APIKeyEnv)
		}
		if p.APIKey == "" {
			return Pool{}, at(here+".api_key_env", "environment variable %s is empty or unset", fp.APIKeyEnv)
		}
	}
	var err error
	if p.Policy, err = ParsePolicy(fp.Policy); err != nil {
		return Pool{}, at(here+".policy", "%v", err)
	}
	p.Epsilon = DefaultEpsilon
	if fp.Epsilon != nil {
		if e := *fp.Epsilon; e <= 0 || e > 10 || math.IsNaN(e) {
			return Pool{}, at(here+".epsilon", "epsilon must be in (0, 10]")
		}
		p.Epsilon = *fp.Epsilon
	}
	p.MinSlack = DefaultMinSlack
	if fp.MinSlack != nil {
		if n := *fp.MinSlack; n < 0 || n > 1000 {
			return Pool{}, at(here+".min_slack", "min_slack must be in [0, 1000]")
		}
		p.MinSlack = *fp.MinSlack
	}
	return p, nil
}

// parseHealth reads the file's health settings into dst.
func parseHealth(h *fileHealth, dst *Health, at lineError) error {
	for _, d := range []struct {
		name string
		src  string
		dst  *time.Duration
	}{
		{"interval", h.Interval, &dst.Interval},
		{"timeout", h.Timeout, &dst.Timeout},
		{"min_backoff", h.MinBackoff, &dst.MinBackoff},
		{"max_backoff", h.MaxBackoff, &dst.MaxBackoff},
	} {
		if d.src == "" {
			continue
		}
		v, err := time.ParseDuration(d.src)
		if err != nil || v <= 0 {
			return at("$.health."+d.name, "a positive duration such as 5s is needed")
		}
		*d.dst = v
	}
	if h.Fall < 0 {
		return at("$.health.fall", "fall must not be negative")
	}
	dst.Fall = h.Fall
	return nil
}

// SingleTopology is the fleet of one base URL serving every model (RESPGATE_UPSTREAM_URL with
// an affinity header, or a test).
func SingleTopology(baseURL, apiKey string) (Topology, error) {
	if err := checkURL(baseURL); err != nil {
		return Topology{}, fmt.Errorf("upstream URL: %w", err)
	}
	t := Topology{Pools: []Pool{{Name: "default", URLs: []string{baseURL}, Models: []string{"*"}, APIKey: apiKey, Epsilon: DefaultEpsilon, MinSlack: DefaultMinSlack}}}
	t.Health.defaults()
	return t, nil
}

// lineOf is the line of the node at the YAML path p, 0 when there is none.
func lineOf(f *ast.File, p string) int {
	yp, err := yaml.PathString(p)
	if err != nil {
		return 0
	}
	n, err := yp.FilterFile(f)
	if err != nil || n == nil || n.GetToken() == nil {
		return 0
	}
	return n.GetToken().Position.Line
}

// checkURL accepts an absolute http(s) base URL without query or fragment; its error never
// quotes the URL, which may hold credentials.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("not an absolute http(s) base URL without query or fragment (such as http://vllm-0:8000/v1)")
	}
	return nil
}

// ReplicaID is a replica's identity: its base URL without credentials, query, fragment or
// trailing slash. It is what a stored response names (store.Response.Replica), what rendezvous
// hashing hashes and what metrics label, so it must be the same on every respgate replica:
// configure the same URLs everywhere.
func ReplicaID(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return "invalid-url"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return strings.TrimSuffix(u.String(), "/")
}

// matches reports whether model is one of the patterns. "*" alone matches every model, as in
// --context-window: path.Match's * stops at a slash, and most model names have one.
func matches(patterns []string, model string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, model); ok || p == "*" {
			return true
		}
	}
	return false
}
