package seal_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/respgate/respgate/seal"
)

// body is a blob's decoded body (nonce ‖ tenant tag ‖ ciphertext), and reblob its inverse.
func body(t *testing.T, blob string) (prefix string, raw []byte) {
	t.Helper()
	i := strings.LastIndexByte(blob, '.')
	raw, err := base64.RawURLEncoding.DecodeString(blob[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	return blob[:i+1], raw
}

func reblob(prefix string, raw []byte) string {
	return prefix + base64.RawURLEncoding.EncodeToString(raw)
}

// The tenant is part of what the AEAD authenticates: a blob of tenant A whose tenant tag is
// replaced by tenant B's (spliced from a blob B holds) does not open for B, nor for A.
func TestASplicedTenantTagDoesNotOpen(t *testing.T) {
	r := ring(t, []seal.Key{key("k1", 1)})
	a := seal.Binding{Tenant: "tenant-a", ItemID: "rs_1", ItemType: "reasoning"}
	b := seal.Binding{Tenant: "tenant-b", ItemID: "rs_1", ItemType: "reasoning"}
	blobA, _ := r.Seal(a, []byte("A's hidden reasoning"))
	blobB, _ := r.Seal(b, []byte("B's own"))
	prefix, rawA := body(t, blobA)
	_, rawB := body(t, blobB)
	spliced := append([]byte(nil), rawA...)
	copy(spliced[12:20], rawB[12:20])
	for _, who := range []seal.Binding{b, a} {
		got, err := r.Open(who, reblob(prefix, spliced))
		if err == nil {
			t.Fatalf("A's blob with B's tenant tag opened for %s: %q", who.Tenant, got)
		}
		if !errors.Is(err, seal.ErrTampered) {
			t.Fatalf("spliced blob opened as %s: %v, want ErrTampered", who.Tenant, err)
		}
	}
}

// Only a blob that authenticates under the ring and names another tenant is "another tenant's";
// random bytes, and a blob whose tenant tag lost a bit, were modified (issue 38 item 6).
func TestOnlyAnAuthenticBlobOfAnotherTenantIsCalledAnotherTenants(t *testing.T) {
	r := ring(t, []seal.Key{key("k1", 1)})
	blob, _ := r.Seal(bind, []byte("x"))
	other := seal.Binding{Tenant: "tenant-b", ItemID: bind.ItemID, ItemType: bind.ItemType}
	if _, err := r.Open(other, blob); !errors.Is(err, seal.ErrOtherTenant) {
		t.Fatalf("A's authentic blob opened by B: %v, want ErrOtherTenant", err)
	}
	prefix, raw := body(t, blob)
	for bit := range 64 {
		flipped := append([]byte(nil), raw...)
		flipped[12+bit/8] ^= 1 << (bit % 8)
		for _, who := range []seal.Binding{bind, other} {
			if _, err := r.Open(who, reblob(prefix, flipped)); !errors.Is(err, seal.ErrTampered) {
				t.Fatalf("tenant tag bit %d flipped, opened by %s: %v, want ErrTampered", bit, who.Tenant, err)
			}
		}
	}
	for n := range 8 {
		junk := make([]byte, 36+n*17)
		_, _ = rand.Read(junk)
		if _, err := r.Open(bind, reblob("rgr1.k1.", junk)); !errors.Is(err, seal.ErrTampered) {
			t.Fatalf("random %d bytes: %v, want ErrTampered", len(junk), err)
		}
	}
	// Another tenant's blob for another item did not authenticate for this item: modified.
	if _, err := r.Open(seal.Binding{Tenant: "tenant-b", ItemID: "rs_other", ItemType: bind.ItemType}, blob); !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("another tenant's blob of another item: %v, want ErrTampered", err)
	}
}
