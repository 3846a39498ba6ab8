package seal_test

import (
	"bytes"
	"testing"

	"github.com/respgate/respgate/seal"
)

// sealAllocs is what one Seal allocates with the toolchain of go.mod: the HMAC of the tenant tag,
// the associated data, the sealed bytes, the encoded blob and its string. A change of the
// toolchain's crypto internals may move it; a buffer that regrows adds one.
const sealAllocs = 11

// Seal makes each of its buffers once, with the capacity its content needs, so a seal allocates
// the same few times whatever the plaintext's size: the sealed bytes (nonce, tenant tag,
// ciphertext and GCM tag) and the encoded blob never regrow.
func TestSealSizesItsBuffersOnce(t *testing.T) {
	r := ring(t, []seal.Key{key("k1", 1)})
	for _, n := range []int{0, 1, 16, 17, 100, 4096} {
		plain := bytes.Repeat([]byte("x"), n)
		if got := testing.AllocsPerRun(20, func() { _, _ = r.Seal(bind, plain) }); got > sealAllocs {
			t.Errorf("Seal of %d bytes allocates %v times, want at most %d", n, got, sealAllocs)
		}
	}
}
