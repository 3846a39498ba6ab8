package vllmsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/respgate/respgate/wire"
)

// Dialect is how a served model talks: which vLLM code path serves it.
type Dialect int

const (
	// Harmony is gpt-oss through vLLM's harmony path (StreamingHarmonyContext).
	Harmony Dialect = iota + 1
	// ReasoningParser is a chat-template model with a reasoning parser and a tool-call parser
	// (Qwen3-like; vLLM's SimpleContext and SimpleStreamingEventProcessor).
	ReasoningParser
)

// String names the dialect ("harmony", "reasoning-parser").
func (d Dialect) String() string {
	switch d {
	case Harmony:
		return "harmony"
	case ReasoningParser:
		return "reasoning-parser"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// The model names served by default.
const (
	HarmonyModel = "openai/gpt-oss-sim"
	ParserModel  = "Qwen/Qwen3-sim"
)

// Model is a served model name and the dialect it speaks.
type Model struct {
	Name    string
	Dialect Dialect
}

// Options configures a Sim. The zero value serves both default models with every vLLM quirk on.
type Options struct {
	// Models are the served models, the first being the default for a request without a model.
	// Empty means {HarmonyModel, Harmony} and {ParserModel, ReasoningParser}.
	Models []Model
	// DisableQuirks are switched off for every request (a request's quirks= can switch them back on).
	DisableQuirks Quirks
	// Fault is a fault specification applied to every request before the request's own; New panics
	// if it is invalid (check it with ValidateFault).
	Fault string
	// Seed, when not zero, makes every id a function of the seed and the request's arrival number.
	Seed uint64
	// Now is the clock for created_at; nil means time.Now.
	Now func() time.Time
	// MaxModelLen is the context length: the effective max_output_tokens is MaxModelLen minus the
	// input tokens, and an input that long is refused. 0 means 131072.
	MaxModelLen int
	// RecordLimit is how many requests the log keeps (the oldest are dropped): 0 means 1024, a
	// negative number disables recording.
	RecordLimit int
	// MaxBodyBytes bounds a request body; 0 means 64 MiB.
	MaxBodyBytes int64
	// PrefixCacheBlocks, when positive, turns on the simulated prefix cache (prefix.go): an LRU
	// of that many 16-token blocks of prompt tokens (as /tokenize counts them), whose hits are
	// reported as usage.input_tokens_details.cached_tokens. 0: no cache, cached_tokens 0.
	PrefixCacheBlocks int
	// PrefillBase and PrefillPerToken make the time to the first token PrefillBase +
	// uncached input tokens × PrefillPerToken (streamed: before the first delta; not streamed:
	// before the answer). Zero: no prefill time.
	PrefillBase, PrefillPerToken time.Duration
	// DecodePerToken paces every output token (each delta) when the request's faults set no
	// delay_ms. Zero: no pacing.
	DecodePerToken time.Duration
}

// Request is a request the Sim received: Body holds exactly the bytes received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Sim is the simulated vLLM server, an http.Handler. It is safe for concurrent use. It must be served
// by an http.Server (or httptest.Server): connection cuts abort the handler with http.ErrAbortHandler.
type Sim struct {
	opts    Options
	cache   *prefixCache // nil: PrefixCacheBlocks is 0
	models  []Model
	quirks  Quirks
	arrived atomic.Uint64 // POST /v1/responses requests so far, for seeded ids

	mu   sync.Mutex
	log  []Request // a ring of RecordLimit entries
	next int       // where the next request goes
	full bool
}

// New returns a Sim configured by opts.
func New(opts Options) *Sim {
	if err := ValidateFault(opts.Fault); err != nil {
		panic(err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxModelLen <= 0 {
		opts.MaxModelLen = 131072
	}
	if opts.RecordLimit == 0 {
		opts.RecordLimit = 1024
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	models := opts.Models
	if len(models) == 0 {
		models = []Model{{HarmonyModel, Harmony}, {ParserModel, ReasoningParser}}
	}
	s := &Sim{opts: opts, models: models, quirks: AllQuirks &^ opts.DisableQuirks}
	if opts.PrefixCacheBlocks > 0 {
		s.cache = newPrefixCache(opts.PrefixCacheBlocks)
	}
	if opts.RecordLimit > 0 {
		s.log = make([]Request, 0, min(opts.RecordLimit, 64))
	}
	return s
}

// Requests returns the recorded requests, oldest first (requests to /sim/requests are not recorded).
// The Header and Body of each are shared with the log: treat them as read-only.
func (s *Sim) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, 0, len(s.log))
	if s.full {
		out = append(out, s.log[s.next:]...)
		out = append(out, s.log[:s.next]...)
	} else {
		out = append(out, s.log...)
	}
	return out
}

// Reset forgets the recorded requests.
func (s *Sim) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = s.log[:0]
	s.next, s.full = 0, false
}

func (s *Sim) record(r *http.Request, body []byte) {
	limit := s.opts.RecordLimit
	if limit < 0 {
		return
	}
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.full:
		s.log[s.next] = req
		s.next = (s.next + 1) % limit
	case len(s.log) < limit:
		s.log = append(s.log, req)
		if len(s.log) == limit {
			s.full, s.next = true, 0
		}
	}
}

// ServeHTTP serves vLLM's routes (/v1/responses, /v1/models, /tokenize, /health) and the
// simulator's own /sim/requests.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/sim/requests" {
		s.serveLog(w, r)
		return
	}
	if r.URL.Path == "/health" {
		// vLLM's liveness route: 200 with an empty body while the engine is up; not recorded,
		// since a fleet probes it every few seconds (upstream/fleet).
		w.WriteHeader(http.StatusOK)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	s.record(r, body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, httpError(http.StatusRequestEntityTooLarge))
		} else {
			writeError(w, httpError(http.StatusBadRequest))
		}
		return
	}
	path := r.URL.Path
	switch {
	case path == "/v1/responses":
		if r.Method != http.MethodPost {
			writeError(w, httpError(http.StatusMethodNotAllowed))
			return
		}
		s.create(w, r, body)
	case path == "/tokenize":
		if r.Method != http.MethodPost {
			writeError(w, httpError(http.StatusMethodNotAllowed))
			return
		}
		s.tokenize(w, body)
	case path == "/v1/models":
		if r.Method != http.MethodGet {
			writeError(w, httpError(http.StatusMethodNotAllowed))
			return
		}
		s.serveModels(w)
	case strings.HasPrefix(path, "/v1/responses/"):
		// vLLM without VLLM_ENABLE_RESPONSES_API_STORE has no response to retrieve or cancel
		// (docs/wire.md §6.3).
		id := strings.TrimPrefix(path, "/v1/responses/")
		switch {
		case r.Method == http.MethodGet && !strings.Contains(id, "/"):
			writeError(w, responseNotFound(id))
		case r.Method == http.MethodPost && strings.HasSuffix(id, "/cancel"):
			writeError(w, responseNotFound(strings.TrimSuffix(id, "/cancel")))
		default:
			writeError(w, httpError(http.StatusNotFound))
		}
	default:
		writeError(w, httpError(http.StatusNotFound))
	}
}

func (s *Sim) lookup(name string) (Model, bool) {
	if name == "" {
		return s.models[0], true
	}
	for _, m := range s.models {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}

// create serves POST /v1/responses, checking the request in the order vLLM does
// (api_router.create_responses → OpenAIServingResponses._create_responses).
func (s *Sim) create(w http.ResponseWriter, r *http.Request, body []byte) {
	arrival := s.arrived.Add(1)
	// The route's validate_json_request dependency runs first (entrypoints/openai/utils.py).
	if mediaType, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(mediaType), "application/json") {
		writeError(w, mediaTypeError())
		return
	}
	f := newFault(s.quirks)
	_ = f.apply(s.opts.Fault) // validated by New
	req, verr := decodeRequest(body)
	var base string
	if req != nil && req.Model != nil {
		var query string
		base, query = splitModel(*req.Model)
		if err := f.apply(query); err != nil {
			writeError(w, badRequest("%s", err.Error()))
			return
		}
	}
	if err := f.apply(r.Header.Get("X-Sim-Fault")); err != nil {
		writeError(w, badRequest("%s", err.Error()))
		return
	}
	if f.status != 0 {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		writeError(w, faultError(f.status))
		return
	}
	model, ok := s.lookup(base)
	if build, known := knownError(f.errorName); known {
		writeError(w, build(model.Dialect, s.opts.MaxModelLen))
		return
	}
	if verr != nil {
		writeError(w, verr)
		return
	}
	if !ok {
		writeError(w, unknownModel(base))
		return
	}
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		writeError(w, responseNotFound(*req.PreviousResponseID))
		return
	}
	if tc := req.toolChoice(); model.Dialect == Harmony && tc.mode != "auto" && tc.mode != "none" {
		// _make_request_with_harmony raises NotImplementedError, which create_error_response maps
		// to 501 "NotImplementedError".
		writeError(w, toolChoiceHarmony())
		return
	}
	if n := req.MaxOutputTokens; n != nil && *n < 1 {
		writeError(w, badRequest("max_tokens must be at least 1, got %d.", *n)) // SamplingParams._verify_args
		return
	}
	conv, verr := readInput(model.Dialect, req.Input, s.cache != nil)
	if verr != nil {
		writeError(w, verr)
		return
	}
	t := newTurn(s, model, req, conv, &f, newIDGen(s.opts.Seed, arrival))
	if t.inputTokens >= s.opts.MaxModelLen {
		writeError(w, contextLength(model.Dialect, t.inputTokens, s.opts.MaxModelLen))
		return
	}
	if req.stream() {
		t.stream(w, r)
		return
	}
	t.respond(w, r)
}

// serveModels answers GET /v1/models in vLLM's ModelCard shape (entrypoints/openai/models/protocol.py).
func (s *Sim) serveModels(w http.ResponseWriter) {
	now := s.opts.Now().Unix()
	ids := newIDGen(s.opts.Seed, 0)
	b := []byte(`{"object":"list","data":[`)
	for i, m := range s.models {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = wire.AppendString(b, m.Name)
		b = append(b, `,"object":"model","created":`...)
		b = appendInt(b, int(now))
		b = append(b, `,"owned_by":"vllm","root":`...)
		b = wire.AppendString(b, m.Name)
		b = append(b, `,"parent":null,"max_model_len":`...)
		b = appendInt(b, s.opts.MaxModelLen)
		b = append(b, `,"permission":[{"id":`...)
		b = wire.AppendString(b, ids.hex("modelperm-"))
		b = append(b, `,"object":"model_permission","created":`...)
		b = appendInt(b, int(now))
		b = append(b, `,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,`+
			`"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*",`+
			`"group":null,"is_blocking":false}]}`...)
	}
	b = append(b, "]}"...)
	writeJSON(w, http.StatusOK, b)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// logEntry is one recorded request as GET /sim/requests shows it; the body is a string holding the
// exact bytes received.
type logEntry struct {
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
}

func (s *Sim) serveLog(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		reqs := s.Requests()
		entries := make([]logEntry, len(reqs))
		for i, q := range reqs {
			entries[i] = logEntry{Method: q.Method, Path: q.Path, Header: q.Header, Body: string(q.Body)}
		}
		b, err := json.Marshal(entries)
		if err != nil {
			writeError(w, httpError(http.StatusInternalServerError))
			return
		}
		writeJSON(w, http.StatusOK, b)
	case http.MethodDelete:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, httpError(http.StatusMethodNotAllowed))
	}
}
