package vllmsim

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// idgen makes uuid4-shaped ids like vLLM's random_uuid. One idgen serves one request, so that with a
// seed the ids depend only on the seed and the request's arrival number, not on other requests.
type idgen struct{ r *rand.Rand }

func newIDGen(seed, request uint64) idgen {
	if seed == 0 {
		return idgen{rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	}
	return idgen{rand.New(rand.NewPCG(seed, request))}
}

func (g idgen) bytes() [16]byte {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], g.r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], g.r.Uint64())
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return b
}

// hex returns prefix + 32 hex digits (vLLM: f"msg_{random_uuid()}").
func (g idgen) hex(prefix string) string {
	b := g.bytes()
	out := make([]byte, len(prefix)+32)
	copy(out, prefix)
	hex.Encode(out[len(prefix):], b[:])
	return string(out)
}

// uuid returns a bare dashed UUID, as the parser path streams item ids (docs/wire.md §6.5 quirk 3).
func (g idgen) uuid() string {
	b := g.bytes()
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
