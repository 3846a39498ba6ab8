package rehydrate

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/wire"
)

func testRing(t testing.TB, keys ...seal.Key) *seal.Ring {
	t.Helper()
	if len(keys) == 0 {
		keys = []seal.Key{{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}}
	}
	r, err := seal.NewRing(keys, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sealFor(t testing.TB, r *seal.Ring, tenant, id, content string) string {
	t.Helper()
	blob, err := r.Seal(seal.Binding{Tenant: tenant, ItemID: id, ItemType: wire.TypeReasoning}, []byte(content))
	if err != nil {
		t.Fatal(err)
	}
	return blob
}

const sealedParts = `[{"type":"reasoning_text","text":"first step"},{"type":"reasoning_text","text":"second \"step\""}]`

// TestOwnEncryptedContentIsOpenedAndReplayedInPlace: a reasoning item that carries only
// respgate's blob is replayed with the plaintext it sealed, where it stands; the blob never
// crosses; the stored input item gets the plaintext beside its blob.
func TestOwnEncryptedContentIsOpenedAndReplayedInPlace(t *testing.T) {
	r := testRing(t)
	blob := sealFor(t, r, "tenant-a", "rs_1", sealedParts)
	in := mustInput(t, `[{"role":"user","content":"q"},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"`+blob+`"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}]`)
	res := mustBuild(t, &Params{Input: in, Keys: r, Tenant: "tenant-a"})
	got := upstreamInput(t, res.Body)
	want := `{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"first step\nsecond \"step\""}]}`
	if len(got) != 4 || got[1] != want {
		t.Fatalf("upstream input %v", got)
	}
	if bytes.Contains(res.Body, []byte("rgr1.")) || bytes.Contains(res.Body, []byte("encrypted_content")) {
		t.Fatalf("the blob crossed: %s", res.Body)
	}
	if res.Stats.SealedOpened != 1 || res.Stats.ReasoningReplayed != 1 {
		t.Fatalf("stats %+v", res.Stats)
	}
	stored := members(t, res.Input[1].JSON)
	if compact(t, stored["content"]) != sealedParts || !strings.Contains(string(stored["encrypted_content"]), blob) {
		t.Fatalf("stored input item %s", res.Input[1].JSON)
	}
	// Content beside the blob, whatever it says, is replaced by the blob's, unread: nothing in the
	// answer depends on whether it matches (no equality oracle, issue 38 item 4).
	for _, content := range []string{sealedParts, `[{"type":"reasoning_text","text":"something else"}]`,
		`[{"type":"reasoning_text","text":"first step"},{"type":"reasoning_text","text":"second \"step\""},{"type":"reasoning_text","text":"x"}]`} {
		in := mustInput(t, `[{"type":"reasoning","id":"rs_1","content":`+content+`,"encrypted_content":"`+blob+`"}]`)
		res := mustBuild(t, &Params{Input: in, Keys: r, Tenant: "tenant-a"})
		if got := upstreamInput(t, res.Body); len(got) != 1 || got[0] != want {
			t.Fatalf("content %s beside the blob: vLLM gets %v", content, got)
		}
		if stored := members(t, res.Input[0].JSON); compact(t, stored["content"]) != sealedParts {
			t.Fatalf("content %s beside the blob: stored %s", content, res.Input[0].JSON)
		}
	}
}

// TestOwnEncryptedContentThatDoesNotOpenIsA400SayingWhy covers another tenant's blob, a modified
// one, another item's, a retired and an unknown key: each is invalid_encrypted_content naming
// input[i], and the message says which without quoting content.
func TestOwnEncryptedContentThatDoesNotOpenIsA400SayingWhy(t *testing.T) {
	k1 := seal.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}
	k2 := seal.Key{ID: "k2", Secret: bytes.Repeat([]byte{2}, 32)}
	r := testRing(t, k1)
	blob := sealFor(t, r, "tenant-a", "rs_1", sealedParts)
	// One base64url character of the sealed bytes changed to another valid one (flipping a bit of
	// the character could leave the alphabet, a malformed blob rather than a modified one, for
	// some random nonces).
	flipped := []byte(blob)
	if i := len(flipped) - 10; flipped[i] == 'A' {
		flipped[i] = 'B'
	} else {
		flipped[i] = 'A'
	}
	retired, err := seal.NewRing([]seal.Key{k2}, []string{"k1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tenant, id, blob string
		ring                   *seal.Ring
		says                   string
	}{
		{"another tenant", "tenant-b", "rs_1", blob, r, "another API key"},
		{"modified", "tenant-a", "rs_1", string(flipped), r, "was modified"},
		{"another item", "tenant-a", "rs_2", blob, r, "another item"},
		{"retired key", "tenant-a", "rs_1", blob, retired, "key 'k1', which has been retired"},
		{"unknown key", "tenant-a", "rs_1", blob, testRing(t, k2), "key 'k1', which this gateway does not have"},
		{"malformed", "tenant-a", "rs_1", "rgr1.k1.%%%", r, "not well-formed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := mustInput(t, `[{"role":"user","content":"q"},{"type":"reasoning","id":"`+tc.id+`","summary":[],"encrypted_content":"`+tc.blob+`"}]`)
			ae := buildErr(t, &Params{Input: in, Keys: tc.ring, Tenant: tc.tenant})
			if ae.Code != CodeInvalidEncryptedContent || ae.Param != "input[1]" || !strings.Contains(ae.Message, tc.says) {
				t.Fatalf("error %+v, want invalid_encrypted_content on input[1] saying %q", ae, tc.says)
			}
			if strings.Contains(ae.Message, "step") || strings.Contains(ae.Message, tc.blob) {
				t.Fatalf("the message reveals content: %s", ae.Message)
			}
		})
	}
}

// TestForeignCiphertextKeepsTodaysBehaviour: OpenAI's blobs are ignored beside plaintext and an
// early 400 alone, whether or not a ring is configured.
func TestForeignCiphertextKeepsTodaysBehaviour(t *testing.T) {
	r := testRing(t)
	with := mustInput(t, `[{"type":"reasoning","id":"rs_1","content":[{"type":"reasoning_text","text":"t"}],"encrypted_content":"gAAAAfoo"}]`)
	if got := upstreamInput(t, mustBuild(t, &Params{Input: with, Keys: r, Tenant: "a"}).Body); len(got) != 1 || strings.Contains(got[0], "gAAAA") {
		t.Fatalf("upstream %v", got)
	}
	alone := mustInput(t, `[{"type":"reasoning","id":"rs_1","encrypted_content":"gAAAAfoo"}]`)
	if ae := buildErr(t, &Params{Input: alone, Keys: r, Tenant: "a"}); ae.Code != CodeEncryptedReasoning {
		t.Fatalf("foreign alone: %+v", ae)
	}
}

// TestCurrentTurnDropsReasoningAnAssistantMessageFollows: across a finished turn, a three-step
// tool loop and a new user turn, current_turn replays only the reasoning of the active loop;
// all_turns replays everything.
func TestCurrentTurnDropsReasoningAnAssistantMessageFollows(t *testing.T) {
	reason := func(id string) string {
		return `{"type":"reasoning","id":"` + id + `","content":[{"type":"reasoning_text","text":"` + id + `"}]}`
	}
	call := func(n string) string {
		return `{"type":"function_call","call_id":"c` + n + `","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c` + n + `","output":"o"}`
	}
	loop := `{"role":"user","content":"u1"},` + reason("rs_a") + `,` + call("1") + `,` + reason("rs_b") + `,` + call("2") + `,` + reason("rs_c") + `,` + call("3")
	finished := loop + `,` + reason("rs_d") + `,{"role":"assistant","content":"done"}`
	ids := func(body []byte) string {
		var out []string
		for _, it := range upstreamInput(t, body) {
			if strings.Contains(it, `"type":"reasoning"`) {
				out = append(out, it[strings.Index(it, `"id":"`)+6:][:4])
			}
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name, input, context, want string
	}{
		{"inside the tool loop", "[" + loop + "]", wire.ContextCurrentTurn, "rs_a,rs_b,rs_c"},
		{"new user turn", "[" + finished + `,{"role":"user","content":"u2"}]`, wire.ContextCurrentTurn, ""},
		{"new user turn, its own loop", "[" + finished + `,{"role":"user","content":"u2"},` + reason("rs_e") + `,` + call("4") + "]", wire.ContextCurrentTurn, "rs_e"},
		{"all turns", "[" + finished + `,{"role":"user","content":"u2"}]`, wire.ContextAllTurns, "rs_a,rs_b,rs_c,rs_d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustBuild(t, &Params{Input: mustInput(t, tc.input), ReasoningContext: tc.context})
			if got := ids(res.Body); got != tc.want {
				t.Fatalf("reasoning replayed %q, want %q\n%s", got, tc.want, res.Body)
			}
			if n := strings.Count(tc.input, `"type":"reasoning"`) - strings.Count(tc.want, "rs_"); res.Stats.ReasoningDropped != n {
				t.Fatalf("ReasoningDropped %d, want %d", res.Stats.ReasoningDropped, n)
			}
			if n := strings.Count(tc.want, "rs_"); res.Stats.ReasoningReplayed != n {
				t.Fatalf("ReasoningReplayed %d, want %d (the dropped ones are not replayed)", res.Stats.ReasoningReplayed, n)
			}
			if len(res.Input) != len(mustInput(t, tc.input)) {
				t.Fatalf("stored input has %d items: the stored copy must keep every item", len(res.Input))
			}
		})
	}
	// A history that starts with dropped reasoning leaves a valid array.
	hist := mustItems(t, reason("rs_h"), `{"type":"message","role":"assistant","content":"a"}`)
	res := mustBuild(t, &Params{History: hist, Input: mustInput(t, `"next"`), ReasoningContext: wire.ContextCurrentTurn})
	if got := upstreamInput(t, res.Body); len(got) != 2 || res.Stats.Items != 2 {
		t.Fatalf("upstream %v stats %+v", got, res.Stats)
	}
}

// OpenSealed (the Conversations API's items route, server/conversations.go) returns a sealed
// reasoning item with the plaintext beside its blob, leaves other items alone, and names the
// item by exactly the param it was given when the blob does not open.
func TestOpenSealedOpensOwnBlobsAndNamesTheItemItWasGiven(t *testing.T) {
	r := testRing(t)
	blob := sealFor(t, r, "tenant-a", "rs_1", sealedParts)
	it := mustInput(t, `[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"`+blob+`"}]`)[0]
	out, opened, err := OpenSealed(it, r, "tenant-a", "items[3]")
	if err != nil || !opened {
		t.Fatalf("opened %v, err %v", opened, err)
	}
	m := members(t, out.JSON)
	if compact(t, m["content"]) != sealedParts || !strings.Contains(string(m["encrypted_content"]), blob) {
		t.Fatalf("opened item %s", out.JSON)
	}
	plain := mustInput(t, `[{"type":"reasoning","id":"rs_2","summary":[],"content":[{"type":"reasoning_text","text":"t"}]}]`)[0]
	if out, opened, err := OpenSealed(plain, r, "tenant-a", "items[0]"); err != nil || opened || string(out.JSON) != string(plain.JSON) {
		t.Fatalf("an item without a blob: opened %v, err %v, %s", opened, err, out.JSON)
	}
	_, opened, err = OpenSealed(it, r, "tenant-b", "items[3]")
	var ae *wire.APIError
	if opened || !errors.As(err, &ae) || ae.Code != CodeInvalidEncryptedContent || ae.Param != "items[3]" {
		t.Fatalf("another tenant's blob: opened %v, err %v", opened, err)
	}
}
