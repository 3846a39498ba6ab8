// Package faultproxy is an in-process TCP proxy for tests that injects network faults between a
// client and a server: refused connections, added latency, stalls, a cut after N bytes, a reset
// (RST), a bandwidth limit, each per direction, and one-shot triggers that fire when a byte
// pattern passes (cut before it, cut inside it, stall at it, or lose the reply that follows it).
// The chaos suite (integration/chaos, docs/testing.md) puts one in front of Postgres and one in
// front of the vLLM simulator.
//
// Shopify's toxiproxy would do most of this, but its Go module is not served by the module proxy
// this project builds from, and it has no pattern triggers, which the suite needs to hit a phase
// ("during COMMIT") by an event instead of a timer.
//
// It is for tests only and must not be imported by production code.
package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Direction is one way through the proxy.
type Direction int

const (
	// ToServer is client → server (requests, SQL).
	ToServer Direction = iota
	// ToClient is server → client (responses, SSE, rows).
	ToClient
)

func (d Direction) String() string {
	if d == ToServer {
		return "to-server"
	}
	return "to-client"
}

// Faults are the standing faults of one direction; the zero value forwards everything at once.
// A change applies to live connections from their next chunk on.
type Faults struct {
	// Delay is added before each chunk is forwarded.
	Delay time.Duration
	// BytesPerSecond, when positive, limits the throughput of each connection in this direction.
	BytesPerSecond int
	// CutAfter, when positive, resets a connection once this many bytes went this way on it.
	CutAfter int64
	// Stall holds every chunk until the faults change or the proxy is released.
	Stall bool
}

// Action is what a Trigger does when its pattern passes.
type Action int

const (
	// CutBefore forwards the bytes before the match, then resets the connection.
	CutBefore Action = iota
	// CutInside forwards the bytes up to Offset bytes into the match, then resets the connection
	// (inside a frame, a line or a UTF-8 rune).
	CutInside
	// StallAt forwards the bytes before the match and holds the rest until Trigger.Release.
	StallAt
	// LoseReply forwards the chunk with the match, then drops everything the other side sends
	// back and resets the connection when the reply arrives: an ambiguous outcome (the server
	// acted, the client never learns it).
	LoseReply
)

// Spec describes a trigger: the pattern and what happens when it passes.
type Spec struct {
	Match  []byte
	Fold   bool // match case-insensitively (ASCII)
	Action Action
	Offset int // for CutInside
}

// Trigger is a one-shot fault armed on a direction: it fires on the first connection where
// its Match passes that way.
type Trigger struct {
	Spec

	fired    chan struct{}
	released chan struct{}
	relOnce  sync.Once
}

// Fired is closed when the trigger has fired: before either side can see its fault, so a client
// whose request failed because of it always finds it closed.
func (tr *Trigger) Fired() <-chan struct{} { return tr.fired }

// Release lets a StallAt trigger's connection go on (a no-op for the other actions).
func (tr *Trigger) Release() { tr.relOnce.Do(func() { close(tr.released) }) }

// Proxy forwards connections from its listening address to a target address.
type Proxy struct {
	target string
	addr   string

	mu       sync.Mutex
	ln       net.Listener
	faults   [2]Faults
	triggers [2][]*Trigger
	links    map[*link]struct{}
	change   chan struct{} // closed and replaced whenever faults change
	closed   bool
	accepted int
	wg       sync.WaitGroup
}

// New starts a proxy to target (host:port) on a free loopback port; it stops when t ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Start starts a proxy to target on a free loopback port; Close stops it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), links: map[*link]struct{}{}, change: make(chan struct{})}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Accepted is how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.handle(c)
			}()
		}
	}()
}

// Refuse closes the listening socket: new connections are refused (ECONNREFUSED) until Accept.
// Live connections are not touched (see DropAll).
func (p *Proxy) Refuse() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

// Accept listens again on the same address after Refuse.
func (p *Proxy) Accept() error {
	p.mu.Lock()
	if p.ln != nil || p.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	var ln net.Listener
	var err error
	// The port was ours a moment ago; on loopback it is free again at once (SO_REUSEADDR).
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

// Down refuses new connections and resets every live one: the server is gone.
func (p *Proxy) Down() { p.Refuse(); p.DropAll() }

// DropAll resets (RST) every live connection.
func (p *Proxy) DropAll() {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
}

// Live is how many connections are open through the proxy.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Set replaces the standing faults of a direction.
func (p *Proxy) Set(d Direction, f Faults) {
	p.mu.Lock()
	p.faults[d] = f
	close(p.change)
	p.change = make(chan struct{})
	p.mu.Unlock()
}

// Clear removes every standing fault and trigger, and releases stalls.
func (p *Proxy) Clear() {
	p.mu.Lock()
	p.faults = [2]Faults{}
	trs := append(p.triggers[0], p.triggers[1]...)
	p.triggers = [2][]*Trigger{}
	close(p.change)
	p.change = make(chan struct{})
	p.mu.Unlock()
	for _, tr := range trs {
		tr.Release()
	}
}

// Arm adds a one-shot trigger on direction d and returns it.
func (p *Proxy) Arm(d Direction, s Spec) *Trigger {
	t := &Trigger{Spec: s,
		fired: make(chan struct{}), released: make(chan struct{})}
	p.mu.Lock()
	p.triggers[d] = append(p.triggers[d], t)
	p.mu.Unlock()
	return t
}

// Close stops the proxy and resets every connection, and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Refuse()
	p.Clear()
	p.DropAll()
	p.wg.Wait()
}

// link is one proxied connection pair.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
	mu             sync.Mutex
	loseReply      [2]bool // drop what flows this way, reset on first data
}

func (l *link) reset() {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close sends RST
			}
			_ = c.Close()
		}
		close(l.done)
	})
}

func (p *Proxy) handle(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		// The target is down: the client sees a reset.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.links[l] = struct{}{}
	p.accepted++
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, ToServer, c, s) }()
	go func() { defer wg.Done(); p.pump(l, ToClient, s, c) }()
	wg.Wait()
	l.reset()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies src to dst applying direction d's faults. A clean EOF is passed on as a half-close
// (FIN), so each side sees what the other did.
func (p *Proxy) pump(l *link, d Direction, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	var sent int64
	var tail []byte // the last bytes of the previous chunk, for matches across chunks
	for {
		p.mu.Lock()
		f := p.faults[d]
		p.mu.Unlock()
		n := len(buf)
		if f.BytesPerSecond > 0 && n > f.BytesPerSecond/10+1 {
			n = f.BytesPerSecond/10 + 1
		}
		k, err := src.Read(buf[:n])
		if k > 0 {
			chunk := buf[:k]
			l.mu.Lock()
			lose := l.loseReply[d]
			l.mu.Unlock()
			if lose {
				l.reset()
				return
			}
			if !p.wait(l, d) {
				return
			}
			written, stop := p.fire(l, d, dst, &tail, chunk)
			if stop {
				return
			}
			if written {
				sent += int64(len(chunk))
				continue
			}
			p.mu.Lock()
			f = p.faults[d]
			p.mu.Unlock()
			if f.Delay > 0 && !sleep(l, f.Delay) {
				return
			}
			if f.BytesPerSecond > 0 && !sleep(l, time.Duration(len(chunk))*time.Second/time.Duration(f.BytesPerSecond)) {
				return
			}
			if f.CutAfter > 0 && sent+int64(len(chunk)) >= f.CutAfter {
				// A connection that carried more before the fault was set is cut at once.
				_, _ = dst.Write(chunk[:max(0, f.CutAfter-sent)])
				l.reset()
				return
			}
			if _, werr := dst.Write(chunk); werr != nil {
				l.reset()
				return
			}
			sent += int64(len(chunk))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			l.reset()
			return
		}
	}
}

// wait blocks while direction d is stalled; false if the link was reset meanwhile.
func (p *Proxy) wait(l *link, d Direction) bool {
	for {
		p.mu.Lock()
		stalled, ch := p.faults[d].Stall && !p.closed, p.change
		p.mu.Unlock()
		if !stalled {
			return true
		}
		select {
		case <-ch:
		case <-l.done:
			return false
		}
	}
}

// fire applies the first armed trigger of direction d whose pattern is in chunk (or straddles
// the previous chunk's tail). It writes what the action lets through; written means the whole
// chunk went through already, stop means the link is gone.
func (p *Proxy) fire(l *link, d Direction, dst net.Conn, tail *[]byte, chunk []byte) (written, stop bool) {
	p.mu.Lock()
	trs := p.triggers[d]
	p.mu.Unlock()
	for _, tr := range trs {
		hay := append(append([]byte{}, *tail...), chunk...)
		i := index(hay, tr.Match, tr.Fold)
		if i < 0 {
			continue
		}
		if !p.disarm(d, tr) {
			continue
		}
		start := i - len(*tail) // where the match starts in chunk (negative: in the tail)
		switch tr.Action {
		case CutBefore, CutInside:
			upto := start
			if tr.Action == CutInside {
				upto += tr.Offset
			}
			upto = max(0, min(upto, len(chunk)))
			_, _ = dst.Write(chunk[:upto])
			close(tr.fired) // before the reset: whoever sees the reset must find the trigger fired
			l.reset()
			return false, true
		case StallAt:
			upto := max(0, start)
			if _, err := dst.Write(chunk[:upto]); err != nil {
				l.reset()
				close(tr.fired)
				return false, true
			}
			close(tr.fired)
			select {
			case <-tr.released:
			case <-l.done:
				return false, true
			}
			if _, err := dst.Write(chunk[upto:]); err != nil {
				l.reset()
				return false, true
			}
			*tail = nil
			return true, false
		case LoseReply:
			// The request goes through; the reply to it is lost (pump resets the link when the
			// other direction next carries data).
			l.mu.Lock()
			l.loseReply[1-d] = true
			l.mu.Unlock()
			p.keepTail(tail, chunk)
			close(tr.fired) // before the request goes on, as for a cut
			_, err := dst.Write(chunk)
			if err != nil {
				l.reset()
				return false, true
			}
			return true, false
		}
	}
	p.keepTail(tail, chunk)
	return false, false
}

func (p *Proxy) keepTail(tail *[]byte, chunk []byte) {
	const keep = 256
	if len(chunk) >= keep {
		*tail = append((*tail)[:0], chunk[len(chunk)-keep:]...)
		return
	}
	*tail = append(*tail, chunk...)
	if len(*tail) > keep {
		*tail = (*tail)[len(*tail)-keep:]
	}
}

// disarm removes tr from direction d; false if another connection already took it.
func (p *Proxy) disarm(d Direction, tr *Trigger) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.triggers[d] {
		if x == tr {
			p.triggers[d] = append(p.triggers[d][:i:i], p.triggers[d][i+1:]...)
			return true
		}
	}
	return false
}

func index(hay, needle []byte, fold bool) int {
	if !fold {
		return bytes.Index(hay, needle)
	}
	return bytes.Index(bytes.ToLower(hay), bytes.ToLower(needle))
}

// sleep waits d unless the link is reset first.
func sleep(l *link, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}
