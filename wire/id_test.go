package wire

import (
	"strings"
	"testing"
)

// Clip keeps a value of up to 64 bytes whole, and cuts a longer one at a rune boundary, marked "…".
func TestClipKeepsUpTo64Bytes(t *testing.T) {
	x64 := strings.Repeat("x", 64)
	for in, want := range map[string]string{
		"":                                   "",
		x64:                                  x64,
		x64 + "y":                            x64 + "…",
		strings.Repeat("x", 63) + "é":        strings.Repeat("x", 63) + "…",
		strings.Repeat("x", 62) + "é" + "yz": strings.Repeat("x", 62) + "é" + "…",
	} {
		if got := Clip(in); got != want {
			t.Errorf("Clip(%q) = %q, want %q", in, got, want)
		}
	}
}
