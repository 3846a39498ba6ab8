package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/upstream"
)

// config is the parsed configuration: the command's own settings, and the server's and upstream
// client's, filled in place through the settings table.
type config struct {
	listen, debugListen, databaseURL, apiKeys, logLevel   string
	upstreamsFile, affinityHeader                         string
	toolPolicy, sealKeys, sealKeysFile, reasoningExposure string
	dbMaxConns                                            int
	shutdownTimeout                                       time.Duration
	server                                                server.Config
	upstream                                              upstream.Config
	flags                                                 *flag.FlagSet // the values as parsed, for the start-up log

	// compactionPromptFile and compactionThresholdPercent are read into server.Config after
	// parsing (docs/compaction.md).
	compactionPromptFile       string
	compactionThresholdPercent int
}

// setting is one row of the configuration: a flag, its RESPGATE_* variable (envName), its line in
// the start-up log (logKey) and its row in docs/configuration.md (TestConfigurationDocsMatchSettings)
// all come from it, so a setting is written once.
type setting struct {
	flag string // flag name, without dashes
	def  string // default, in the flag's own syntax ("" for an empty string)
	help string // the meaning, in Markdown (backquotes are dropped for -h)
	// secret values are never logged: the log says whether one is set, or what show returns.
	secret bool
	// zeroOK marks a number or duration whose 0 means something (help says what); otherwise 0 is
	// rejected at start, like every negative number or duration.
	zeroOK bool
	// oneOf lists the accepted values of a string setting (nil: any).
	oneOf []string
	// example is a valid value other than the default, for tests of a setting whose values
	// have a syntax (empty: the tests derive one).
	example string
	// bind points into the config: *string, *int, *int64 or *time.Duration.
	bind func(c *config) any
	// show is what the start-up log prints for the value (nil: the value itself, or for a secret
	// whether it is set).
	show func(v string) any
}

// serverDefaults are the server's own defaults (server.DefaultConfig): the rows of server
// settings show them rather than repeat them, as the upstream and accumulator rows show those
// packages' exported defaults. Each default is written once, in the package that applies it.
var serverDefaults = server.DefaultConfig()

// durDef writes a default duration in the flag's shortest syntax (1m, not 1m0s).
func durDef(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// intDef writes a default number.
func intDef[T int | int64](n T) string { return strconv.FormatInt(int64(n), 10) }

// settings is respgate's configuration, in the order of -h and docs/configuration.md.
var settings = []setting{
	{flag: "listen", def: ":8080", help: "address to listen on",
		bind: func(c *config) any { return &c.listen }},
	{flag: "debug-listen", def: "", help: "address of a second listener serving Go's pprof profiles (`/debug/pprof/`), with no key: bind it to loopback or a private interface; empty serves none (docs/operations.md \"Metrics and traces\")",
		bind: func(c *config) any { return &c.debugListen }},
	{flag: "upstream-url", def: "", help: "vLLM base URL including `/v1`; empty (and no `--upstreams`) starts the built-in simulator (and logs a loud warning)",
		bind: func(c *config) any { return &c.upstream.BaseURL }, show: func(v string) any { return redactUpstreamURL(v) }},
	{flag: "upstream-api-key", def: "", help: "bearer key sent to vLLM (never logged)", secret: true,
		bind: func(c *config) any { return &c.upstream.APIKey }},
	{flag: "upstreams", def: "", help: "YAML file describing a fleet of vLLM servers: pools, models, keys, routing policy, health probes (docs/fleet.md); reloaded on SIGHUP; set it or `--upstream-url`, not both",
		example: "upstreams.yaml", bind: func(c *config) any { return &c.upstreamsFile }},
	{flag: "upstream-affinity-header", def: "", help: "request header that carries an HMAC of each turn's routing key to the upstream, for the session affinity of an external router (vLLM production-stack, llm-d; docs/fleet.md); empty sends none",
		example: "x-session-id", bind: func(c *config) any { return &c.affinityHeader }},
	{flag: "database-url", def: "sqlite:./data/respgate.db",
		help: "`postgres://…` (or `postgresql://…`), `sqlite:PATH` or `sqlite::memory:`; the SQLite folder is created 0700, the file 0600; a password with `@ / ? # % [` or a space must be percent-encoded (logged with the password redacted)",
		bind: func(c *config) any { return &c.databaseURL }, show: func(v string) any { return redactURL(v) }},
	{flag: "database-max-conns", def: "32", help: "Postgres connection pool size per process (each turn holds a connection only for its history load and its commits)",
		bind: func(c *config) any { return &c.dbMaxConns }},
	{flag: "api-keys", def: "", help: "comma-separated accepted client keys; empty accepts any key, each isolated as its own tenant (logged as a count)", secret: true,
		bind: func(c *config) any { return &c.apiKeys }, show: func(v string) any { return len(splitKeys(v)) }},
	{flag: "tool-policy", def: "drop", oneOf: []string{"drop", "reject"},
		help: "tools vLLM cannot serve (hosted, custom): `drop` (named in `X-Respgate-Dropped-Tools`) or `reject` (400)",
		bind: func(c *config) any { return &c.toolPolicy }},
	{flag: "seal-keys", def: "", secret: true,
		help:    "keys of respgate's own `encrypted_content`: comma-separated `kid:base64` (32 bytes each, e.g. `openssl rand -base64 32`), the first seals, all open; `kid:retired` names a retired key; empty uses the key generated in the store (logged as the key ids; docs/reasoning.md)",
		example: "k1:" + strings.Repeat("A", 43) + "=",
		bind:    func(c *config) any { return &c.sealKeys }, show: func(v string) any { return sealKeyIDs(v) }},
	{flag: "seal-keys-file", def: "", help: "a file holding the `--seal-keys` list instead (one entry per line or comma-separated; `#` comments)",
		example: os.DevNull, bind: func(c *config) any { return &c.sealKeysFile }},
	{flag: "reasoning-exposure", def: "raw", oneOf: []string{"raw", "hidden"},
		help: "`raw` shows reasoning as the model produced it; `hidden` never shows reasoning text to clients (no reasoning events, `summary: []`, no `content`, always `encrypted_content`) while stored items keep it for replay",
		bind: func(c *config) any { return &c.reasoningExposure }},
	{flag: "reasoning-context", def: "all_turns",
		help:    "default `reasoning.context` of requests that do not set it: `all_turns` or `current_turn`, or `model-pattern=value` pairs, comma-separated (e.g. `openai/gpt-oss-*=current_turn`), first match wins, unmatched models get `all_turns`",
		example: "openai/gpt-oss-*=current_turn", bind: func(c *config) any { return &c.server.ReasoningContext }},
	{flag: "log-level", def: "info", oneOf: []string{"debug", "info", "warn", "error"},
		help: "`debug`, `info`, `warn` or `error`; JSON logs on stderr; bodies, reasoning and keys are never logged at any level",
		bind: func(c *config) any { return &c.logLevel }},
	{flag: "shutdown-timeout", def: "30s", help: "on SIGTERM, in-flight requests may finish this long; remaining streams then end with `response.failed`",
		bind: func(c *config) any { return &c.shutdownTimeout }},
	{flag: "keepalive", def: durDef(serverDefaults.KeepAlive), help: "SSE comment keepalive interval during upstream silence, and WebSocket ping interval (a pong must come within `--write-timeout`)",
		bind: func(c *config) any { return &c.server.KeepAlive }},
	{flag: "upstream-connect-timeout", def: durDef(upstream.DefaultConnectTimeout), help: "connect timeout toward vLLM, and for a streamed request the wait for its response headers",
		bind: func(c *config) any { return &c.upstream.ConnectTimeout }},
	{flag: "upstream-idle-timeout", def: durDef(upstream.DefaultIdleTimeout), help: "longest silence of a vLLM stream before the turn fails",
		bind: func(c *config) any { return &c.upstream.IdleTimeout }},
	{flag: "sync-timeout", def: durDef(serverDefaults.SyncTimeout), help: "longest wait for vLLM's answer to a non-streamed request (vLLM sends it only once generation ends); beyond it 504",
		bind: func(c *config) any { return &c.server.SyncTimeout }},
	{flag: "commit-timeout", def: durDef(serverDefaults.CommitTimeout), help: "longest time to store a finished turn; beyond it the response is `failed`; must be less than `--lease-ttl`",
		bind: func(c *config) any { return &c.server.CommitTimeout }},
	{flag: "write-timeout", def: durDef(serverDefaults.WriteTimeout), help: "longest time one event may take to reach a client; a client that stops reading is dropped",
		bind: func(c *config) any { return &c.server.WriteTimeout }},
	{flag: "body-read-timeout", def: durDef(serverDefaults.BodyReadTimeout), help: "longest time to read a request body (408 beyond)",
		bind: func(c *config) any { return &c.server.BodyReadTimeout }},
	{flag: "lease-ttl", def: durDef(serverDefaults.LeaseTTL), help: "lease of an in-progress response, renewed while it streams; after a crash the sweeper marks it `failed` once expired; must be longer than `--write-timeout`",
		bind: func(c *config) any { return &c.server.LeaseTTL }},
	{flag: "sweep-interval", def: durDef(serverDefaults.SweepInterval), help: "how often expired leases are swept and retention applied (also once at start)",
		bind: func(c *config) any { return &c.server.SweepInterval }},
	{flag: "retention", def: "0", zeroOK: true, help: "delete finished responses older than this (e.g. `720h`), with their items except those a conversation lists; `0` keeps everything",
		bind: func(c *config) any { return &c.server.Retention }},
	{flag: "max-body-bytes", def: intDef(serverDefaults.MaxBodyBytes), help: "largest request body (413 beyond)",
		bind: func(c *config) any { return &c.server.MaxBodyBytes }},
	{flag: "max-body-bytes-in-flight", def: "0", zeroOK: true, help: "bytes of all request bodies being read or held at once; beyond it 503 with `Retry-After`; `0` is 4 × `--max-body-bytes`",
		bind: func(c *config) any { return &c.server.MaxBodyBytesInFlight }},
	{flag: "max-header-bytes", def: intDef(serverDefaults.MaxHeaderBytes), help: "largest request line and headers (431 beyond)",
		bind: func(c *config) any { return &c.server.MaxHeaderBytes }},
	{flag: "max-input-items", def: intDef(serverDefaults.MaxInputItems), help: "most items in one request's `input` (400 beyond)",
		bind: func(c *config) any { return &c.server.MaxInputItems }},
	{flag: "max-json-depth", def: intDef(serverDefaults.MaxJSONDepth), help: "deepest nesting of a request body's JSON (400 beyond)",
		bind: func(c *config) any { return &c.server.MaxJSONDepth }},
	{flag: "upstream-max-event-bytes", def: intDef(upstream.DefaultMaxEventBytes), help: "largest SSE event from vLLM, and largest non-streamed answer; beyond it the turn fails",
		bind: func(c *config) any { return &c.upstream.MaxEventBytes }},
	{flag: "max-output-items", def: intDef(accumulator.DefaultMaxItems), help: "most output items, content and summary parts of one response; beyond it the turn fails",
		bind: func(c *config) any { return &c.server.MaxOutputItems }},
	{flag: "max-output-item-bytes", def: intDef(accumulator.DefaultMaxItemBytes), help: "most bytes of one output item (text, arguments, JSON); beyond it the turn fails",
		bind: func(c *config) any { return &c.server.MaxOutputItemBytes }},
	{flag: "max-output-bytes", def: "0", zeroOK: true, help: "most bytes of one response's output; beyond it the turn fails; `0` is 4 × `--max-output-item-bytes`",
		bind: func(c *config) any { return &c.server.MaxOutputBytes }},
	{flag: "chat-replay-idle", def: durDef(serverDefaults.ChatReplayIdle), help: "a Chat Completions replay record unused this long is purged with the sweep (docs/chat-completions.md)",
		bind: func(c *config) any { return &c.server.ChatReplayIdle }},
	{flag: "chat-replay-max-records", def: intDef(serverDefaults.ChatReplayMaxRecords), help: "replay records kept per tenant and scope, the most recently used",
		bind: func(c *config) any { return &c.server.ChatReplayMaxRecords }},
	{flag: "chat-replay-max-record-bytes", def: intDef(serverDefaults.ChatReplayMaxRecordBytes), help: "most bytes of one chat turn's items kept for replay; a larger turn is not replayable",
		bind: func(c *config) any { return &c.server.ChatReplayMaxRecordBytes }},
	{flag: "chat-replay-max-bytes", def: intDef(serverDefaults.ChatReplayMaxBytes), help: "most bytes of captured items replayed into one chat request; replay stops where it would pass it",
		bind: func(c *config) any { return &c.server.ChatReplayMaxBytes }},
	{flag: "max-streams", def: "0", zeroOK: true, help: "concurrent streams per process, `0` = unbounded; beyond it 503 with `Retry-After`",
		bind: func(c *config) any { return &c.server.MaxConcurrentStreams }},
	{flag: "ws-max-message-bytes", def: "0", zeroOK: true, help: "largest WebSocket client message (`response.create`); beyond it the connection is closed with status 1009; `0` is `--max-body-bytes`",
		bind: func(c *config) any { return &c.server.WSMaxMessageBytes }},
	{flag: "ws-idle-timeout", def: durDef(serverDefaults.WSIdleTimeout), help: "a WebSocket connection with no turn and no message for this long is closed (status 1000)",
		bind: func(c *config) any { return &c.server.WSIdleTimeout }},
	{flag: "ws-cache-bytes", def: intDef(serverDefaults.WSCacheBytes), help: "item JSON a WebSocket connection keeps of its recent `store:false` responses (at most 8) so they can be continued on it",
		bind: func(c *config) any { return &c.server.WSCacheBytes }},
	{flag: "ws-max-lanes", def: intDef(serverDefaults.WSMaxLanes), help: "lanes (`stream_id`) one WebSocket connection runs at once, each a FIFO queue of `response.create`; one more is refused with an error event 429 `too_many_lanes`",
		bind: func(c *config) any { return &c.server.WSMaxLanes }},
	{flag: "chain-cache-bytes", def: intDef(serverDefaults.ChainCacheBytes), help: "item JSON a replica keeps of the histories of recent chain heads, so continuing one costs one generation check instead of a chain load (docs/scaling.md)",
		bind: func(c *config) any { return &c.server.ChainCacheBytes }},
	{flag: "compaction-keep-turns", def: intDef(serverDefaults.CompactionKeepTurns), help: "most recent user turns automatic compaction keeps verbatim; older turns (after the leading system/developer messages) are summarised (POST /v1/responses/compact keeps every user message)",
		bind: func(c *config) any { return &c.server.CompactionKeepTurns }},
	{flag: "compaction-prompt-file", def: "", help: "file holding the handoff prompt the model answers with a compaction summary; empty (or an empty file) uses the built-in prompt (docs/compaction.md)",
		example: os.DevNull, bind: func(c *config) any { return &c.compactionPromptFile }},
	{flag: "compaction-threshold-percent", def: "0", zeroOK: true, help: "compact a turn's history before the turn once its estimated size passes this percentage of the model's context window; `0` turns automatic compaction off",
		bind: func(c *config) any { return &c.compactionThresholdPercent }},
	{flag: "context-window", def: "", help: "context window in tokens per model, `model-pattern=tokens` pairs, comma-separated, or one number for every model; models not named use vLLM's `max_model_len` from `/v1/models`",
		example: "openai/gpt-oss-*=131072", bind: func(c *config) any { return &c.server.ContextWindow }},
	{flag: "background-workers", def: intDef(serverDefaults.BackgroundWorkers), help: "background turns (`background:true`) this process runs at once (docs/background.md)",
		bind: func(c *config) any { return &c.server.BackgroundWorkers }},
	{flag: "background-timeout", def: durDef(serverDefaults.BackgroundTimeout), help: "longest run of one background turn; beyond it the response is `failed`",
		bind: func(c *config) any { return &c.server.BackgroundTimeout }},
	{flag: "background-max-queued", def: intDef(serverDefaults.BackgroundMaxQueued), help: "queued background responses of all tenants; beyond it 503 `background_queue_full` with `Retry-After`",
		bind: func(c *config) any { return &c.server.BackgroundMaxQueued }},
	{flag: "background-max-per-tenant", def: intDef(serverDefaults.BackgroundMaxPerTenant), help: "queued or running background responses of one tenant; beyond it 429 `too_many_background_responses` with `Retry-After`",
		bind: func(c *config) any { return &c.server.BackgroundMaxPerTenant }},
	{flag: "background-poll", def: "0", zeroOK: true, help: "how often an idle worker looks for background jobs nothing woke it for; `0`: River's 1s (River's insert notifications wake workers: Postgres LISTEN/NOTIFY, on SQLite River's notification table)",
		bind: func(c *config) any { return &c.server.BackgroundPoll }},
	{flag: "background-follow-poll", def: durDef(serverDefaults.BackgroundFollowPoll), help: "how often a reader of a running background response's stream looks at the store when no notification woke it (Postgres: LISTEN/NOTIFY wakes it; a fallback for a missed one)",
		bind: func(c *config) any { return &c.server.BackgroundFollowPoll }},
}

// envName is the environment variable of a flag: RESPGATE_ and the flag's name in upper case
// with dashes as underscores (--upstream-url: RESPGATE_UPSTREAM_URL).
func envName(flagName string) string {
	return "RESPGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// logKey is a setting's attribute in the start-up log line.
func logKey(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// usage is the -h text of a setting. flag.PrintDefaults reads a backquoted word as the name of
// the flag's argument, so the Markdown quotes go.
func (s *setting) usage() string {
	return strings.ReplaceAll(s.help, "`", "") + " (" + envName(s.flag) + ")"
}

// newFlagSet defines every setting as a flag writing into c, with its default.
func newFlagSet(c *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("respgate", flag.ContinueOnError)
	fs.SetOutput(out)
	for i := range settings {
		s := &settings[i]
		mustParse := func(v any, err error) any {
			if err != nil {
				panic(fmt.Sprintf("settings: --%s: default %q: %v", s.flag, s.def, err))
			}
			return v
		}
		switch p := s.bind(c).(type) {
		case *string:
			fs.StringVar(p, s.flag, s.def, s.usage())
		case *int:
			fs.IntVar(p, s.flag, mustParse(strconv.Atoi(s.def)).(int), s.usage())
		case *int64:
			fs.Int64Var(p, s.flag, mustParse(strconv.ParseInt(s.def, 10, 64)).(int64), s.usage())
		case *time.Duration:
			fs.DurationVar(p, s.flag, mustParse(time.ParseDuration(s.def)).(time.Duration), s.usage())
		default:
			panic(fmt.Sprintf("settings: --%s binds an unsupported %T", s.flag, p))
		}
	}
	return fs
}

// expectedForm says what a setting's value must look like; flag's own errors say only "parse
// error" or "value out of range".
func expectedForm(s *setting) string {
	switch s.bind(&config{}).(type) {
	case *time.Duration:
		return "want a duration such as 30s, 5m or 1h30m (a number and a unit: ms, s, m, h)"
	case *int:
		return "want a whole number such as 100 (no unit)"
	case *int64:
		return "want a whole number such as 33554432 (bytes, no unit)"
	}
	return "not a valid value"
}

// settingByFlag returns the setting of a flag name.
func settingByFlag(name string) *setting {
	for i := range settings {
		if settings[i].flag == name {
			return &settings[i]
		}
	}
	return nil
}

// valueError is the one line a malformed value gets: the flag, its variable, what form is
// expected, and the value itself unless the setting is a secret.
func valueError(s *setting, value string) error {
	msg := fmt.Sprintf("--%s (%s): %s", s.flag, envName(s.flag), expectedForm(s))
	if !s.secret {
		msg += fmt.Sprintf(", not %q", value)
	}
	return errors.New(msg)
}

var (
	invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([a-z0-9-]+): (.*)$`)
	unknownFlag  = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
)

// flagError rewrites a flag package error as one actionable line (the package would print it
// with the whole usage, over a hundred lines, after it).
func flagError(err error) error {
	if m := invalidValue.FindStringSubmatch(err.Error()); m != nil {
		if s := settingByFlag(m[2]); s != nil {
			return valueError(s, m[1])
		}
	}
	if m := unknownFlag.FindStringSubmatch(err.Error()); m != nil {
		name, _, _ := strings.Cut(m[1], "=")
		if len(name) > 40 || strings.ContainsAny(name, " \t") {
			name = name[:min(len(name), 40)] + "…"
		}
		return fmt.Errorf("unknown flag --%s: respgate -h lists the flags, docs/configuration.md describes them", name)
	}
	return fmt.Errorf("%w: respgate -h lists the flags", err)
}

// parseConfig reads the settings from the environment (lookupEnv, normally os.LookupEnv) and then
// the command line, which wins, and checks them. -h prints the usage to out and returns
// flag.ErrHelp.
func parseConfig(args []string, lookupEnv func(string) (string, bool), out io.Writer) (*config, error) {
	c := &config{}
	fs := newFlagSet(c, io.Discard) // errors are rewritten as one line below; -h prints in full
	fs.Usage = func() {}
	// Environment first, through each flag's own parser, so a malformed value is an error as it
	// is on the command line.
	for _, s := range settings {
		if v, ok := lookupEnv(envName(s.flag)); ok {
			if err := fs.Set(s.flag, v); err != nil {
				return nil, valueError(&s, v)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(out)
			fmt.Fprintln(out, "usage: respgate [flags]        serve (every flag also reads its RESPGATE_* variable)")
			fmt.Fprintln(out, "       respgate admin -h      operator commands: migrate, inspect, export, purge, keys")
			fmt.Fprintln(out, "       respgate version       print the version (also --version)")
			fs.PrintDefaults()
			return nil, err
		}
		return nil, flagError(err)
	}
	if fs.NArg() > 0 {
		// Not echoed: it may be the rest of an unquoted secret.
		return nil, fmt.Errorf("%d unexpected arguments after the flags: respgate takes only flags (quote a value that holds spaces)", fs.NArg())
	}
	c.flags = fs
	if err := c.check(); err != nil {
		return nil, err
	}
	c.server.APIKeys = splitKeys(c.apiKeys)
	c.server.ToolPolicy = server.ToolPolicy(c.toolPolicy)
	c.server.ReasoningExposure = server.ReasoningExposure(c.reasoningExposure)
	if err := c.loadSealKeys(); err != nil {
		return nil, err
	}
	c.server.CompactionThreshold = float64(c.compactionThresholdPercent) / 100
	if c.compactionPromptFile != "" {
		b, err := os.ReadFile(c.compactionPromptFile)
		if err != nil {
			return nil, fmt.Errorf("--compaction-prompt-file: %w", err)
		}
		c.server.CompactionPrompt = strings.TrimSpace(string(b)) // empty: the built-in prompt
	}
	return c, nil
}

// loadSealKeys reads --seal-keys, or the file --seal-keys-file names, into the server's key ring
// settings. Errors never quote a key.
func (c *config) loadSealKeys() error {
	spec := c.sealKeys
	if c.sealKeysFile != "" {
		if spec != "" {
			return errors.New("set --seal-keys (RESPGATE_SEAL_KEYS) or --seal-keys-file (RESPGATE_SEAL_KEYS_FILE), not both")
		}
		b, err := os.ReadFile(c.sealKeysFile)
		if err != nil {
			return fmt.Errorf("--seal-keys-file: %w", err)
		}
		spec = string(b)
	}
	keys, retired, err := seal.ParseKeys(spec)
	if err != nil {
		return fmt.Errorf("--seal-keys: %w", err)
	}
	if len(keys) == 0 && len(retired) > 0 {
		return errors.New("--seal-keys: retired keys need at least one key that seals")
	}
	c.server.SealKeys, c.server.SealRetired = keys, retired
	return nil
}

// sealKeyIDs is what the start-up log shows of --seal-keys: the key ids, never the keys.
func sealKeyIDs(spec string) string {
	keys, retired, err := seal.ParseKeys(spec)
	if err != nil {
		return "<invalid>"
	}
	ids := make([]string, 0, len(keys)+len(retired))
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	for _, id := range retired {
		ids = append(ids, id+" (retired)")
	}
	return strings.Join(ids, ",")
}

// check rejects values the code would otherwise silently replace by a default: a negative (or,
// where 0 means nothing, zero) number or duration, a value outside oneOf, and combinations that
// cannot work.
func (c *config) check() error {
	var errs []error
	for _, s := range settings {
		name := "--" + s.flag + " (" + envName(s.flag) + ")"
		var n int64
		switch p := s.bind(c).(type) {
		case *string:
			if s.oneOf != nil && !slices.Contains(s.oneOf, *p) {
				errs = append(errs, fmt.Errorf("%s must be one of %s, not %q", name, strings.Join(s.oneOf, ", "), *p))
			}
			continue
		case *int:
			n = int64(*p)
		case *int64:
			n = *p
		case *time.Duration:
			n = int64(*p)
		}
		v := c.flags.Lookup(s.flag).Value.String()
		switch {
		case n < 0:
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, v))
		case n == 0 && !s.zeroOK:
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, v))
		}
	}
	// A lease that can expire while its stream is blocked writing to a slow client lets the
	// sweeper fail a response that is still running.
	if c.server.LeaseTTL > 0 && c.server.LeaseTTL <= c.server.WriteTimeout {
		errs = append(errs, fmt.Errorf("--lease-ttl (%s) must be longer than --write-timeout (%s): a lease must outlive a blocked client write",
			c.server.LeaseTTL, c.server.WriteTimeout))
	}
	// A commit (and a background claim) may take up to --commit-timeout while no keeper renews
	// the lease; one allowed as long as the lease can find it expired and the response swept
	// (failed) under a turn that then commits.
	if c.server.CommitTimeout > 0 && c.server.LeaseTTL > 0 && c.server.CommitTimeout >= c.server.LeaseTTL {
		errs = append(errs, fmt.Errorf("--commit-timeout (RESPGATE_COMMIT_TIMEOUT) is %s but must be less than --lease-ttl (RESPGATE_LEASE_TTL), %s: lower the first or raise the second, so a commit cannot outlast its lease and find its response swept",
			c.server.CommitTimeout, c.server.LeaseTTL))
	}
	if c.upstreamsFile != "" && c.upstream.BaseURL != "" {
		errs = append(errs, errors.New("set --upstreams (RESPGATE_UPSTREAMS) or --upstream-url (RESPGATE_UPSTREAM_URL), not both"))
	}
	if h := c.affinityHeader; h != "" && !validHeaderName(h) {
		errs = append(errs, errors.New("--upstream-affinity-header (RESPGATE_UPSTREAM_AFFINITY_HEADER) must be an HTTP header name other than Authorization, Content-Type, Accept, User-Agent, Host or Content-Length"))
	}
	if _, err := engine.ParseContextWindows(c.server.ContextWindow); err != nil {
		errs = append(errs, fmt.Errorf("--context-window (RESPGATE_CONTEXT_WINDOW): %w", err))
	}
	if c.compactionThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("--compaction-threshold-percent (RESPGATE_COMPACTION_THRESHOLD_PERCENT) must be at most 100, got %d", c.compactionThresholdPercent))
	}
	if _, err := engine.ParseReasoningContext(c.server.ReasoningContext); err != nil {
		errs = append(errs, fmt.Errorf("--reasoning-context (RESPGATE_REASONING_CONTEXT): %w", err))
	}
	if isPostgresURL(c.databaseURL) && ambiguousURL(c.databaseURL) {
		// No detail: url.Parse's error quotes the URL, password included.
		errs = append(errs, errors.New("--database-url (RESPGATE_DATABASE_URL) is not a valid URL: percent-encode special characters in the password (@ / ? # % [ and space)"))
	}
	return errors.Join(errs...)
}

// logAttrs is the start-up log line's view of the configuration: every setting, secrets redacted.
func (c *config) logAttrs() []any {
	attrs := make([]any, 0, len(settings))
	for _, s := range settings {
		v := c.flags.Lookup(s.flag).Value.String()
		switch {
		case s.show != nil:
			attrs = append(attrs, slog.Any(logKey(s.flag), s.show(v)))
		case s.secret:
			attrs = append(attrs, slog.Bool(logKey(s.flag)+"_set", v != ""))
		default:
			attrs = append(attrs, slog.String(logKey(s.flag), v))
		}
	}
	return attrs
}

func splitKeys(s string) []string {
	var keys []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// ambiguousURL reports whether parsers may split s differently, so that its password cannot be
// found reliably: it does not parse, or an @ sits outside the user info or twice in the authority
// (an unencoded @ / ? # % [ or space in a password does that; pgx, for one, then reads part of
// the password as the host and prints it in its errors).
func ambiguousURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return true
	}
	if u.User == nil {
		return strings.Contains(s, "@")
	}
	_, rest, _ := strings.Cut(s, "//")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Count(rest, "@") > 1
}

// redactUpstreamURL is redactURL with every query value redacted too: vLLM reads no query
// parameter, so one in its URL is for a proxy in front of it (?api_key=…) and is treated as a
// secret (issue 38 item 7).
func redactUpstreamURL(s string) string {
	r := redactURL(s)
	u, err := url.Parse(r)
	if err != nil || u.RawQuery == "" {
		return r
	}
	q := u.Query()
	for k := range q {
		q[k] = []string{"REDACTED"}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// redactURL is a URL as the log may show it: without a password (in the user info or a query
// parameter such as password= or sslpassword=) and without a fragment. An ambiguous one is
// replaced whole but for its scheme.
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || ambiguousURL(s) {
		scheme := ""
		if i := strings.Index(s, ":"); i > 0 && strings.IndexFunc(s[:i], func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')
		}) < 0 {
			scheme = s[:i] + ":"
			if strings.HasPrefix(s[i:], "://") {
				scheme += "//"
			}
		}
		return scheme + "<unparseable, redacted>"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if strings.Contains(strings.ToLower(k), "pass") {
				q[k] = []string{"REDACTED"}
			}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// validHeaderName reports whether h is a header name (RFC 9110 token) that respgate does not set
// itself on upstream requests.
func validHeaderName(h string) bool {
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	switch strings.ToLower(h) {
	case "authorization", "content-type", "accept", "user-agent", "host", "content-length":
		return false
	}
	return h != ""
}
