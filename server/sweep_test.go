package server

import (
	"strings"
	"testing"
	"time"
)

// The lease must outlive the longest client write: equal is refused too.
func TestNewRefusesALeaseEqualToTheWriteTimeout(t *testing.T) {
	_, err := New(t.Context(), Config{LeaseTTL: 30 * time.Second, WriteTimeout: 30 * time.Second}, &fakeStore{}, nil)
	if err == nil || !strings.Contains(err.Error(), "write timeout") {
		t.Fatalf("New with lease 30s = write timeout 30s: %v", err)
	}
}
