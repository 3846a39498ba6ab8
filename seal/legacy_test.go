package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"
)

// A blob sealed before the tenant tag replaced the tenant in the associated data still opens for
// its tenant, and for no other (it is then "modified": it cannot be authenticated for them).
func TestBlobsSealedWithTheTenantInTheAssociatedDataStillOpen(t *testing.T) {
	r, err := NewRing([]Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, KeySize)}}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := Binding{Tenant: "tenant-a", ItemID: "rs_1", ItemType: "reasoning"}
	e := r.sealer
	raw := make([]byte, nonceSize+tagSize)
	copy(raw[nonceSize:], e.tenantTag(b.Tenant))
	raw = e.aead.Seal(raw, raw[:nonceSize], []byte("old"), legacyAD(e.id, b))
	blob := Prefix + e.id + "." + base64.RawURLEncoding.EncodeToString(raw)
	if got, err := r.Open(b, blob); err != nil || string(got) != "old" {
		t.Fatalf("legacy blob: %q, %v", got, err)
	}
	other := b
	other.Tenant = "tenant-b"
	if got, err := r.Open(other, blob); !errors.Is(err, ErrTampered) {
		t.Fatalf("legacy blob opened by another tenant: %q, %v", got, err)
	}
	// And a new blob never opens under the legacy associated data's rules for another tenant.
	nb, _ := r.Seal(b, []byte("new"))
	if _, err := r.Open(other, nb); !errors.Is(err, ErrOtherTenant) {
		t.Fatalf("new blob opened by another tenant: %v", err)
	}
}
