package seal_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/respgate/respgate/seal"
)

// Key ids are 1 to 32 letters, digits, '-' and '_': every edge of each range is in, the
// characters just outside them are out.
func TestKeyIDsAcceptExactlyTheirAlphabetAndLength(t *testing.T) {
	for _, id := range []string{"a", "z", "A", "Z", "0", "9", "-", "_", strings.Repeat("k", 32), "aZ09-_"} {
		if _, err := seal.NewRing([]seal.Key{key(id, 1)}, nil, 0); err != nil {
			t.Errorf("id %q refused: %v", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("k", 33), "`", "{", "@", "[", "/", ":", ".", " ", "é"} {
		if _, err := seal.NewRing([]seal.Key{key(id, 1)}, nil, 0); err == nil {
			t.Errorf("id %q accepted", id)
		}
		if _, err := seal.NewRing([]seal.Key{key("ok", 1)}, []string{id}, 0); err == nil {
			t.Errorf("retired id %q accepted", id)
		}
	}
}

// A body too short to hold nonce, tenant tag and GCM tag is malformed, whatever its length.
func TestBodiesShorterThanTheirFixedPartsAreMalformed(t *testing.T) {
	r := ring(t, []seal.Key{key("k1", 1)})
	for n := 0; n < 36; n++ {
		blob := "rgr1.k1." + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, n))
		if _, err := r.Open(bind, blob); !errors.Is(err, seal.ErrMalformed) {
			t.Fatalf("%d-byte body: %v, want ErrMalformed", n, err)
		}
	}
	blob := "rgr1.k1." + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 36))
	if _, err := r.Open(bind, blob); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("36-byte body: want ErrTampered (well-formed, does not authenticate)")
	}
}

// String names every key once, the sealing one first and marked.
func TestRingStringListsEachKeyOnce(t *testing.T) {
	r := ring(t, []seal.Key{key("k1", 1), key("k2", 2), key("k3", 3)})
	s := r.String()
	if !strings.HasPrefix(s, "seal.Ring{k1 (seals)") || strings.Count(s, "k1") != 1 || strings.Count(s, "k2") != 1 || strings.Count(s, "k3") != 1 {
		t.Fatalf("String() = %s", s)
	}
	if r.SealingKeyID() != "k1" {
		t.Fatalf("SealingKeyID %q", r.SealingKeyID())
	}
}

// Errors name the entry by its position in the list (comments and blank entries not counted).
func TestParseKeysNamesTheEntryByPosition(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	for spec, want := range map[string]string{
		"k1:" + good + ",k2:short":                   "entry 2",
		"# c\nk1:" + good + "\n,, k2:" + good + ",x": "entry 3",
		"bad.id:" + good:                             "entry 1",
	} {
		_, _, err := seal.ParseKeys(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseKeys(%q) = %v, want it to name %s", spec, err, want)
		}
	}
	// URL-alphabet keys (with '-' or '_') decode as such.
	secret := bytes.Repeat([]byte{0xfb, 0xff}, 16)
	keys, _, err := seal.ParseKeys("u:" + base64.RawURLEncoding.EncodeToString(secret))
	if err != nil || len(keys) != 1 || !bytes.Equal(keys[0].Secret, secret) {
		t.Fatalf("URL-alphabet key: %v %v", keys, err)
	}
}

func TestNewKeySecretIsFreshAndSized(t *testing.T) {
	a, err := seal.NewKeySecret()
	if err != nil || len(a) != seal.KeySize {
		t.Fatalf("NewKeySecret = %d bytes, %v", len(a), err)
	}
	b, _ := seal.NewKeySecret()
	if bytes.Equal(a, b) {
		t.Fatal("two secrets are equal")
	}
}
