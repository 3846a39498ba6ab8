// Package testnet holds network fixtures shared by the tests of several packages.
package testnet

import (
	"net"
	"sync"
	"testing"
)

// SilentServer listens on a loopback port, accepts connections and never answers, so a client
// waits for response headers until its own timeout; it closes everything when the test ends. It
// returns the server's base URL (http://host:port).
func SilentServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}
