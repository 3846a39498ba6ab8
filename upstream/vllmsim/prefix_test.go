package vllmsim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func TestPrefixCacheCountsWholeLeadingBlocks(t *testing.T) {
	c := newPrefixCache(8)
	steps := []struct {
		name   string
		tokens []uint32
		want   int
	}{
		{"a cold prompt hits nothing", seq(0, 40), 0},
		{"the same prompt grown hits its two full blocks", seq(0, 70), 32},
		{"the whole prompt again reports one block less, as vLLM recomputes the last token", seq(0, 64), 48},
		{"a prompt differing in its first token hits nothing", append([]uint32{999}, seq(1, 63)...), 0},
		{"a partial block is never cached", seq(0, 15), 0},
	}
	for _, st := range steps {
		if got := c.use(st.tokens); got != st.want {
			t.Fatalf("%s: cached %d, want %d", st.name, got, st.want)
		}
	}
}

func TestPrefixCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newPrefixCache(4)
	a, b := seq(0, 32), seq(1000, 32)
	c.use(a)                        // a's 2 blocks
	c.use(b)                        // b's 2 blocks: full
	if got := c.use(a); got != 16 { // hit, a is now most recent
		t.Fatalf("a: %d", got)
	}
	c.use(seq(5000, 32)) // evicts b, the least recent
	if got := c.use(append(seq(1000, 32), 1)); got != 0 {
		t.Errorf("b after eviction: cached %d, want 0", got)
	}
	// b's reinsertion just above evicted a: the cache holds 4 blocks.
	if got := c.use(append(seq(0, 32), 1)); got != 0 {
		t.Errorf("a after b's reinsertion: cached %d, want 0", got)
	}
}

// A simulated instance with a prefix cache reports the chain's growing prefix as cached, and
// paces its first token by the uncached part.
func TestSimReportsCachedTokensOfAGrowingChain(t *testing.T) {
	srv, _ := newServer(t, Options{PrefixCacheBlocks: 1024})
	words := strings.Repeat("lorem ipsum dolor sit amet ", 10) // 50 words
	turn := func(input string) (inTokens, cached int) {
		r := post(t, srv, `{"model":"openai/gpt-oss-sim","input":`+input+`}`)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
		var resp struct {
			Usage struct {
				InputTokens        int `json:"input_tokens"`
				InputTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"input_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.raw, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Usage.InputTokens, resp.Usage.InputTokensDetails.CachedTokens
	}
	first := `[{"role":"user","content":"` + words + `"}]`
	in1, c1 := turn(first)
	second := `[{"role":"user","content":"` + words + `"},{"role":"assistant","content":[{"type":"output_text","text":"ok"}]},{"role":"user","content":"more"}]`
	in2, c2 := turn(second)
	if c1 != 0 || c2 != in1/BlockTokens*BlockTokens || c2 >= in2 {
		t.Errorf("turn 1: %d of %d cached; turn 2: %d of %d cached, want the first turn's full blocks", c1, in1, c2, in2)
	}
	// The count agrees with /tokenize's for the same text.
	rec := httptest.NewRecorder()
	New(Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tokenize", strings.NewReader(`{"model":"openai/gpt-oss-sim","messages":[{"role":"user","content":"`+words+`"}]}`)))
	var tk struct{ Count int }
	_ = json.Unmarshal(rec.Body.Bytes(), &tk)
	if tk.Count+3 != in1 {
		t.Errorf("tokenize counts %d (+3 of the turn's framing), the turn %d", tk.Count, in1)
	}
}

func TestPrefillTime(t *testing.T) {
	o := Options{PrefillBase: 2 * time.Millisecond, PrefillPerToken: 50 * time.Microsecond}
	if got := o.prefill(1000, 800); got != 12*time.Millisecond {
		t.Errorf("prefill = %s, want 12ms", got)
	}
	if got := (&Options{}).prefill(1000, 0); got != 0 {
		t.Errorf("no costs: %s", got)
	}
}
