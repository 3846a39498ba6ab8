package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
)

// echoServer answers with every byte it gets.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestForwardsBothWaysAndPassesOnHalfClose(t *testing.T) {
	p := New(t, echoServer(t))
	c := dial(t, p)
	_, _ = c.Write([]byte("hello\n"))
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("got %q, %v", b, err)
	}
}

func TestCutAfterNBytesResets(t *testing.T) {
	p := New(t, echoServer(t))
	p.Set(ToClient, Faults{CutAfter: 3})
	c := dial(t, p)
	_, _ = c.Write([]byte("abcdef\n"))
	b, err := io.ReadAll(c)
	if string(b) != "abc" || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %q, %v; want abc then a reset", b, err)
	}
}

func TestRefuseAndAcceptAgain(t *testing.T) {
	p := New(t, echoServer(t))
	p.Refuse()
	if _, err := net.Dial("tcp", p.Addr()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v", err)
	}
	if err := p.Accept(); err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	_, _ = c.Write([]byte("x\n"))
	if l, err := bufio.NewReader(c).ReadString('\n'); l != "x\n" {
		t.Fatalf("after Accept: %q %v", l, err)
	}
}

func TestTriggerCutsInsideTheMatch(t *testing.T) {
	p := New(t, echoServer(t))
	tr := p.Arm(ToClient, Spec{Match: []byte("héron"), Action: CutInside, Offset: 2})
	c := dial(t, p)
	_, _ = c.Write([]byte("a héron\n"))
	b, _ := io.ReadAll(c)
	<-tr.Fired()
	if string(b) != "a h\xc3" {
		t.Fatalf("got %q, want the cut inside é", b)
	}
}

func TestStallAtHoldsUntilReleased(t *testing.T) {
	p := New(t, echoServer(t))
	tr := p.Arm(ToServer, Spec{Match: []byte("commit"), Fold: true, Action: StallAt})
	c := dial(t, p)
	r := bufio.NewReader(c)
	_, _ = c.Write([]byte("begin\n"))
	if l, _ := r.ReadString('\n'); l != "begin\n" {
		t.Fatalf("got %q", l)
	}
	_, _ = c.Write([]byte("COMMIT\n"))
	<-tr.Fired()
	tr.Release()
	if l, _ := r.ReadString('\n'); l != "COMMIT\n" {
		t.Fatalf("after release: %q", l)
	}
}

func TestLoseReplyDeliversTheRequestButNotTheAnswer(t *testing.T) {
	p := New(t, echoServer(t))
	tr := p.Arm(ToServer, Spec{Match: []byte("commit"), Fold: true, Action: LoseReply})
	c := dial(t, p)
	_, _ = c.Write([]byte("commit\n"))
	<-tr.Fired()
	b, err := io.ReadAll(c)
	if len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %q, %v; want nothing and a reset", b, err)
	}
}

func TestBandwidthAndDelayStillDeliverEverything(t *testing.T) {
	p := New(t, echoServer(t))
	p.Set(ToClient, Faults{BytesPerSecond: 20000})
	p.Set(ToServer, Faults{Delay: 1})
	c := dial(t, p)
	msg := make([]byte, 3000)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	_, _ = c.Write(msg)
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != string(msg) {
		t.Fatalf("got %d bytes, %v", len(b), err)
	}
}

func TestCutAfterSetOnABusyConnectionCutsAtOnce(t *testing.T) {
	p := New(t, echoServer(t))
	c := dial(t, p)
	r := bufio.NewReader(c)
	_, _ = c.Write([]byte("0123456789\n"))
	if l, _ := r.ReadString('\n'); l != "0123456789\n" {
		t.Fatalf("got %q", l)
	}
	p.Set(ToClient, Faults{CutAfter: 5}) // already past it on this connection
	_, _ = c.Write([]byte("more\n"))
	b, err := io.ReadAll(r)
	if len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %q, %v; want an immediate reset", b, err)
	}
}

// A client that saw the cut must find its trigger fired: Fired is closed before the reset. (When
// it was closed after, a chaos scenario that checked Fired once its request had failed found it
// open about once in four runs under -race.)
func TestTriggerHasFiredBeforeItsCutIsSeen(t *testing.T) {
	p := New(t, echoServer(t))
	for i := range 200 {
		tr := p.Arm(ToServer, Spec{Match: []byte("boom"), Action: CutBefore})
		c := dial(t, p)
		_, _ = c.Write([]byte("boom\n"))
		if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("run %d: read %v, want a reset", i, err)
		}
		select {
		case <-tr.Fired():
		default:
			t.Fatalf("run %d: the client saw the reset before the trigger was marked fired", i)
		}
		_ = c.Close()
	}
}
