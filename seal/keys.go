package seal

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// ParseKeys reads a key list as RESPGATE_SEAL_KEYS holds it: comma- (or newline-) separated
// entries "<kid>:<base64 of 32 bytes>" (standard or URL alphabet, padded or not), the first of
// which seals; an entry "<kid>:retired" names a retired key (Open then says so). Blank entries
// and lines starting with '#' are skipped, so a key file can carry comments. Errors name the
// entry by position and kid, never its secret.
func ParseKeys(spec string) (keys []Key, retired []string, err error) {
	n := 0
	for _, line := range strings.Split(spec, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, ent := range strings.Split(line, ",") {
			ent = strings.TrimSpace(ent)
			if ent == "" {
				continue
			}
			n++
			kid, val, ok := strings.Cut(ent, ":")
			kid, val = strings.TrimSpace(kid), strings.TrimSpace(val)
			if !ok {
				return nil, nil, fmt.Errorf("seal keys: entry %d is not <kid>:<base64 key>", n)
			}
			if err := checkKID(kid); err != nil {
				return nil, nil, fmt.Errorf("seal keys: entry %d: %w", n, err)
			}
			if val == "retired" {
				retired = append(retired, kid)
				continue
			}
			secret, err := decodeKey(val)
			if err != nil || len(secret) != KeySize {
				return nil, nil, fmt.Errorf("seal keys: key %q (entry %d) must be %d bytes in base64 (e.g. openssl rand -base64 32)", kid, n, KeySize)
			}
			keys = append(keys, Key{ID: kid, Secret: secret})
		}
	}
	return keys, retired, nil
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// NewKeySecret returns a fresh random 32-byte secret (the store keeps the generated default key).
func NewKeySecret() ([]byte, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("seal: generate key: %w", err)
	}
	return b, nil
}
