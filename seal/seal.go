// Package seal owns the encrypted_content respgate mints itself (docs/reasoning.md): AES-256-GCM
// sealing and opening of an item's private state (a reasoning item's content; later a compaction
// item's summary), in a versioned text format, under a key ring with one sealing key and any
// number of opening keys, with associated data that binds a blob to its tenant, item id and item
// type.
//
// The format is "rgr1.<kid>.<base64url>": a version prefix, the id of the key that sealed it, and
// base64url (no padding) of nonce (12 bytes) ‖ tenant tag (8 bytes) ‖ ciphertext and GCM tag. The
// tenant tag is an HMAC of the tenant under a key derived from the sealing key. The associated
// data is the version, the kid, the item type, the item id and the tenant tag, each length
// prefixed: the tag binds the blob to its tenant (a blob opens only for the tenant whose tag it
// carries, and a changed tag no longer authenticates), and because the tag is in the blob, Open
// can authenticate a blob before it knows whose it is. So it says that a blob belongs to another
// tenant only of a blob that authenticates under the ring and carries another tenant's tag, and
// that it was modified of everything else (random bytes, a flipped bit in the tag), without
// revealing anything of either tenant. Blobs sealed before the tag was in the associated data
// (which held the tenant itself) still open for their tenant.
//
// It must not log and does no I/O: keys are handed in (the command reads RESPGATE_SEAL_KEYS; the
// store keeps the generated default key next to the tenant-HMAC secret). Errors are sentinels
// wrapped with safe text: never a key, a plaintext or the blob.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Prefix starts every blob respgate mints; IsSealed checks for it. Blobs without it (OpenAI's
// "gAAAA…", another gateway's) are foreign.
const Prefix = "rgr1."

// KeySize is the size of a key's secret: AES-256.
const KeySize = 32

// DefaultMaxPlaintext bounds what one blob holds (and so the size of a blob Open decodes), the
// same as the largest output item respgate accepts by default.
const DefaultMaxPlaintext = 16 << 20

const (
	nonceSize = 12
	tagSize   = 8 // tenant tag
	gcmTag    = 16
	maxKID    = 32
)

// Sentinel errors of Open. Each is wrapped with a message that may be shown to the client that
// sent the blob; none of them carries key material or plaintext.
var (
	// ErrNotSealed: the value is not in respgate's format (foreign ciphertext).
	ErrNotSealed = errors.New("not respgate's encrypted_content")
	// ErrMalformed: respgate's prefix, but not a well-formed blob.
	ErrMalformed = errors.New("malformed")
	// ErrTooLarge: larger than the ring's bound.
	ErrTooLarge = errors.New("too large")
	// ErrUnknownKey: sealed under a key id this ring does not know.
	ErrUnknownKey = errors.New("unknown key")
	// ErrRetiredKey: sealed under a key id the operator retired.
	ErrRetiredKey = errors.New("retired key")
	// ErrOtherTenant: sealed for another tenant (API key).
	ErrOtherTenant = errors.New("sealed for another tenant")
	// ErrTampered: authentication failed: the blob was modified, or sealed for another item id
	// or item type.
	ErrTampered = errors.New("modified or sealed for another item")
)

// Binding is the associated data a blob is sealed to: it opens only with the same three values.
type Binding struct {
	Tenant   string // the tenant fingerprint (never the API key)
	ItemID   string // the item's id as the client sees it
	ItemType string // "reasoning", "compaction", …
}

// Key is one key of the ring: its id (letters, digits, '-' and '_', at most 32) and its 32-byte
// secret. Its String, GoString, Format and LogValue print only the id.
type Key struct {
	ID     string
	Secret []byte
}

func (k Key) String() string             { return "seal.Key{" + k.ID + "}" }
func (k Key) GoString() string           { return k.String() }
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue logs the key's id only.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// entry is a key ready for use: its AEAD (under the derived encryption key) and its tenant-tag key.
type entry struct {
	id   string
	aead cipher.AEAD
	tag  []byte
}

// Ring is a set of keys: the first one seals, all of them open, and retired ids are remembered
// so that Open can say a blob's key was retired rather than unknown. Build it with NewRing; it is
// immutable and safe for concurrent use. Its String and LogValue list key ids only.
type Ring struct {
	sealer  *entry
	open    map[string]*entry
	retired map[string]bool
	max     int
}

// NewRing builds a ring from keys (the first one seals; at least one) and the ids of retired keys
// (not usable, but named as retired by Open). maxPlaintext bounds a blob's content (0:
// DefaultMaxPlaintext).
func NewRing(keys []Key, retired []string, maxPlaintext int) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: a ring needs at least one key")
	}
	if maxPlaintext <= 0 {
		maxPlaintext = DefaultMaxPlaintext
	}
	r := &Ring{open: map[string]*entry{}, retired: map[string]bool{}, max: maxPlaintext}
	for _, k := range keys {
		if err := checkKID(k.ID); err != nil {
			return nil, err
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("seal: key %q: the secret must be %d bytes, not %d", k.ID, KeySize, len(k.Secret))
		}
		if _, dup := r.open[k.ID]; dup {
			return nil, fmt.Errorf("seal: key id %q is listed twice", k.ID)
		}
		block, err := aes.NewCipher(derive(k.Secret, "rgr1 aead"))
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", k.ID, err)
		}
		e := &entry{id: k.ID, aead: aead, tag: derive(k.Secret, "rgr1 tenant tag")}
		r.open[k.ID] = e
		if r.sealer == nil {
			r.sealer = e
		}
	}
	for _, id := range retired {
		if err := checkKID(id); err != nil {
			return nil, err
		}
		if _, ok := r.open[id]; ok {
			return nil, fmt.Errorf("seal: key id %q is both listed and retired", id)
		}
		r.retired[id] = true
	}
	return r, nil
}

func checkKID(id string) error {
	if id == "" || len(id) > maxKID {
		return fmt.Errorf("seal: a key id must have 1 to %d characters", maxKID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("seal: key id %q: only letters, digits, '-' and '_' are allowed", id)
		}
	}
	return nil
}

// derive is a subkey of secret for one purpose (HMAC-SHA256, as HKDF-Expand with one block).
func derive(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// SealingKeyID is the id of the key Seal uses.
func (r *Ring) SealingKeyID() string { return r.sealer.id }

// String lists the ring's key ids, never their secrets.
func (r *Ring) String() string {
	ids := []string{r.sealer.id + " (seals)"}
	for id := range r.open {
		if id != r.sealer.id {
			ids = append(ids, id)
		}
	}
	return "seal.Ring{" + strings.Join(ids, ", ") + "}"
}

// LogValue logs the key ids only.
func (r *Ring) LogValue() slog.Value { return slog.StringValue(r.String()) }

// IsSealed reports whether s is in respgate's format (it may still fail to open).
func IsSealed(s string) bool { return strings.HasPrefix(s, Prefix) }

// Seal encrypts plaintext for b under the sealing key and returns the blob. It fails only for a
// plaintext over the ring's bound.
func (r *Ring) Seal(b Binding, plaintext []byte) (string, error) {
	if len(plaintext) > r.max {
		return "", fmt.Errorf("seal: content of %d bytes is over the %d-byte bound: %w", len(plaintext), r.max, ErrTooLarge)
	}
	e := r.sealer
	raw := make([]byte, nonceSize+tagSize, nonceSize+tagSize+len(plaintext)+gcmTag)
	if _, err := rand.Read(raw[:nonceSize]); err != nil {
		return "", fmt.Errorf("seal: nonce: %w", err) // crypto/rand never fails on supported systems
	}
	copy(raw[nonceSize:], e.tenantTag(b.Tenant))
	raw = e.aead.Seal(raw, raw[:nonceSize], plaintext, ad(e.id, b, raw[nonceSize:nonceSize+tagSize]))
	out := make([]byte, 0, len(Prefix)+len(e.id)+1+base64.RawURLEncoding.EncodedLen(len(raw)))
	out = append(out, Prefix...)
	out = append(out, e.id...)
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, raw)
	return string(out), nil
}

// Open checks and decrypts a blob sealed for b and returns its plaintext. Errors wrap the
// sentinels above (errors.Is): ErrNotSealed for foreign values, and for respgate's own the reason
// it cannot be opened.
func (r *Ring) Open(b Binding, blob string) ([]byte, error) {
	if !IsSealed(blob) {
		return nil, ErrNotSealed
	}
	kid, data, ok := strings.Cut(blob[len(Prefix):], ".")
	if !ok || checkKID(kid) != nil {
		return nil, fmt.Errorf("seal: %w: no valid key id", ErrMalformed)
	}
	if base64.RawURLEncoding.DecodedLen(len(data)) > nonceSize+tagSize+r.max+gcmTag {
		return nil, fmt.Errorf("seal: %w: over the %d-byte bound", ErrTooLarge, r.max)
	}
	e, known := r.open[kid]
	switch {
	case r.retired[kid]:
		return nil, fmt.Errorf("seal: key %q: %w", kid, ErrRetiredKey)
	case !known:
		return nil, fmt.Errorf("seal: key %q: %w", kid, ErrUnknownKey)
	}
	raw, err := strict.DecodeString(data)
	if err != nil || len(raw) < nonceSize+tagSize+gcmTag {
		return nil, fmt.Errorf("seal: %w: not base64url of a sealed value", ErrMalformed)
	}
	nonce, tag, sealed := raw[:nonceSize], raw[nonceSize:nonceSize+tagSize], raw[nonceSize+tagSize:]
	mine := hmac.Equal(tag, e.tenantTag(b.Tenant))
	if plain, err := e.aead.Open(nil, nonce, sealed, ad(kid, b, tag)); err == nil {
		if !mine {
			// Authentic, sealed for this item under this ring, for another tenant (issue 38
			// item 6): only this case says so. The plaintext is dropped unseen.
			return nil, fmt.Errorf("seal: %w", ErrOtherTenant)
		}
		return plain, nil
	}
	if mine {
		// A blob sealed before the tag replaced the tenant in the associated data.
		if plain, err := e.aead.Open(nil, nonce, sealed, legacyAD(kid, b)); err == nil {
			return plain, nil
		}
	}
	return nil, fmt.Errorf("seal: %w", ErrTampered)
}

// strict rejects non-zero trailing bits, so each blob has exactly one spelling (a changed last
// character never decodes to the same bytes).
var strict = base64.RawURLEncoding.Strict()

// tenantTag is the first tagSize bytes of HMAC(tag key, tenant).
func (e *entry) tenantTag(tenant string) []byte {
	m := hmac.New(sha256.New, e.tag)
	m.Write([]byte(tenant))
	return m.Sum(nil)[:tagSize]
}

// ad is the associated data: version, kid, type, item id and the tenant tag, each with a 4-byte
// length. The version string differs from legacyAD's, so the two never coincide.
func ad(kid string, b Binding, tag []byte) []byte {
	return appendAD(nil, "rgr1+tag", kid, b.ItemType, b.ItemID, string(tag))
}

// legacyAD is the associated data of blobs sealed before the tenant tag replaced the tenant in it:
// version, kid, type, item id, tenant.
func legacyAD(kid string, b Binding) []byte {
	return appendAD(nil, "rgr1", kid, b.ItemType, b.ItemID, b.Tenant)
}

func appendAD(out []byte, fields ...string) []byte {
	n := 0
	for _, s := range fields {
		n += 4 + len(s)
	}
	out = append(make([]byte, 0, n), out...)
	for _, s := range fields {
		out = binary.BigEndian.AppendUint32(out, uint32(len(s))) //nolint:gosec // G115: strings far below 4 GiB
		out = append(out, s...)
	}
	return out
}
