package main

import "testing"

// The run's Postgres processes together stay within the server's max_connections, each with at
// most respgate's default pool and never less than 4.
func TestPgConnShareFitsTheServersConnections(t *testing.T) {
	for _, tc := range []struct {
		max, reserved string
		want          int
	}{
		{"100", "3", 17},  // (100 − 3 − 10) / 5
		{"1000", "3", 32}, // respgate's default is the ceiling
		{"30", "3", 4},    // a tiny server: the floor (the run may then fail, and says why)
		{"", "3", 16},     // settings not read
		{"100", "x", 16},
	} {
		got := pgConnShare(map[string]string{"max_connections": tc.max, "superuser_reserved_connections": tc.reserved})
		if got != tc.want {
			t.Errorf("max_connections %q reserved %q: %d, want %d", tc.max, tc.reserved, got, tc.want)
		}
		if tc.max == "100" && tc.reserved == "3" && pgProcesses*got+10+3 > 100 {
			t.Errorf("%d processes of %d connections outgrow max_connections 100", pgProcesses, got)
		}
	}
}
