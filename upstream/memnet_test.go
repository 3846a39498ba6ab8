package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
)

// memBase is the base URL of a memServer. It holds a dot so the redactor treats its host as a
// secret, like a real upstream's.
const memBase = "http://upstream.test"

// memNet is an in-memory network over net.Pipe: the Client's transport dials it and an
// http.Server accepts from it. It exists for tests inside synctest.Test: a goroutine waiting on a
// real socket is blocked in the kernel, which synctest cannot see, so the bubble's fake clock
// would never move; over pipes every wait is on a channel and the clock moves as soon as the
// whole exchange is idle.
type memNet struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "upstream.test:80" }

func (n *memNet) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.done:
		return nil, net.ErrClosed
	}
}

func (n *memNet) Close() error {
	n.once.Do(func() { close(n.done) })
	return nil
}

func (n *memNet) Addr() net.Addr { return memAddr{} }

func (n *memNet) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case n.conns <- server:
		return client, nil
	case <-ctx.Done():
		err := ctx.Err()
		_, _ = client.Close(), server.Close()
		return nil, err
	case <-n.done:
		_, _ = client.Close(), server.Close()
		return nil, errors.New("memnet: closed")
	}
}

// memServer serves h over a memNet and returns a Client of it (Config changed by mod, as in
// newTestClient), with this package's own transport settings. Call it inside synctest.Test; the
// server and the Client's connections are closed in t.Cleanup, and the bubble then waits for
// every goroutine of the exchange to end.
func memServer(t *testing.T, h http.Handler, mod func(*Config)) *Client {
	t.Helper()
	n := &memNet{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h} //nolint:gosec // G112: an in-memory server on a net.Pipe in a synctest bubble; a header timeout would fire on the fake clock
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(n)
	}()
	c := newTestClient(t, memBase, func(cfg *Config) {
		if mod != nil {
			mod(cfg)
		}
		tr := newTransport(cfg.ConnectTimeout)
		tr.Proxy = nil
		tr.DialContext = n.DialContext
		cfg.Transport = tr
	})
	t.Cleanup(func() {
		c.CloseIdleConnections()
		_ = srv.Close()
		<-served
	})
	return c
}
