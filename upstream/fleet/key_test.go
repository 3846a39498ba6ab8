package fleet

import "testing"

func TestKey(t *testing.T) {
	base := KeyParams{Tenant: "t1", Instructions: []byte("be brief"), FirstInput: []byte(`{"role":"user","content":"hi"}`)}
	with := func(f func(*KeyParams)) KeyParams { p := base; f(&p); return p }
	opening := Key(base)
	lineage := Key(with(func(p *KeyParams) { p.LineageRoot = "resp_1" }))
	for _, tc := range []struct {
		name string
		a, b KeyParams
		same bool
	}{
		{"the lineage root wins over everything else", with(func(p *KeyParams) { p.LineageRoot = "resp_1"; p.ConversationID = "conv_1"; p.PromptCacheKey = "x" }),
			with(func(p *KeyParams) { p.LineageRoot = "resp_1"; p.Instructions = []byte("other") }), true},
		{"two chains differ", with(func(p *KeyParams) { p.LineageRoot = "resp_1" }), with(func(p *KeyParams) { p.LineageRoot = "resp_2" }), false},
		{"the conversation wins over prompt_cache_key and the opening", with(func(p *KeyParams) { p.ConversationID = "conv_1"; p.PromptCacheKey = "x" }),
			with(func(p *KeyParams) { p.ConversationID = "conv_1"; p.FirstInput = nil }), true},
		{"prompt_cache_key wins over the opening", with(func(p *KeyParams) { p.PromptCacheKey = "x" }),
			with(func(p *KeyParams) { p.PromptCacheKey = "x"; p.Instructions = nil }), true},
		{"the opening decides when nothing else is set", base, with(func(p *KeyParams) {}), true},
		{"another first input is another key", base, with(func(p *KeyParams) { p.FirstInput = []byte("bye") }), false},
		{"fields cannot run into each other", with(func(p *KeyParams) { p.Instructions = []byte("ab"); p.FirstInput = []byte("c") }),
			with(func(p *KeyParams) { p.Instructions = []byte("a"); p.FirstInput = []byte("bc") }), false},
		{"tenants never share a key", with(func(p *KeyParams) { p.PromptCacheKey = "x" }), with(func(p *KeyParams) { p.Tenant = "t2"; p.PromptCacheKey = "x" }), false},
		{"an id and a conversation with the same text differ", with(func(p *KeyParams) { p.LineageRoot = "same" }), with(func(p *KeyParams) { p.ConversationID = "same" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Key(tc.a) == Key(tc.b); got != tc.same {
				t.Errorf("Key equal = %v, want %v", got, tc.same)
			}
		})
	}
	if opening == lineage {
		t.Error("the opening and a lineage gave one key")
	}
	// A golden value: every respgate replica, version and architecture computes this key.
	if got := Key(KeyParams{Tenant: "t", LineageRoot: "resp_1"}); got != "iDxIE80AOXm1NNq0CdJ9QH5U" {
		t.Errorf("Key = %s, want the golden iDxIE80AOXm1NNq0CdJ9QH5U", got)
	}
}

func TestAffinityValueHidesTheKey(t *testing.T) {
	k := Key(KeyParams{Tenant: "t", LineageRoot: "resp_1"})
	a, b := AffinityValue([]byte("s1"), k), AffinityValue([]byte("s2"), k)
	if a == b || a == k || len(a) != 24 {
		t.Errorf("values %q and %q for key %q", a, b, k)
	}
	if AffinityValue([]byte("s1"), k) != a {
		t.Error("not deterministic")
	}
	if AffinityValue([]byte("s1"), "") != "" {
		t.Error("an empty key gave a value")
	}
}
