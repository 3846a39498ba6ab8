package main

import (
	"net"
	"strconv"
	"testing"
)

// freeRun finds n loopback addresses on consecutive ports, each free to listen on.
func TestFreeRunIsConsecutiveAndFree(t *testing.T) {
	addrs, err := freeRun(4)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 4 {
		t.Fatalf("%d addresses, want 4", len(addrs))
	}
	var first int
	for i, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if i == 0 {
			first = p
		} else if p != first+i {
			t.Fatalf("address %d is %s, want port %d", i, a, first+i)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("listen on %s: %v", a, err)
		}
		_ = ln.Close()
	}
}
