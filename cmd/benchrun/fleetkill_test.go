package main

import (
	"testing"
	"time"
)

// trail writes one letter per turn of the session from the kill on, in start order: V for the
// victim, the others lettered a, b… as they first appear, "." for a turn that did not complete,
// and "|" before the first turn started after the return.
func TestTrailLettersTheSessionsTurnsFromTheKill(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	turn := func(session, start int, replica, status string) fleetTurn {
		return fleetTurn{session: session, start: at(start), replica: replica, status: status}
	}
	turns := []fleetTurn{
		turn(1, 9, "v", "completed"),
		turn(1, 1, "v", "completed"), // before the kill: left out
		turn(1, 3, "x", "completed"),
		turn(1, 4, "y", "completed"),
		turn(2, 5, "v", "completed"), // another session: left out
		turn(1, 6, "x", "failed"),
		turn(1, 7, "x", "completed"),
		turn(1, 10, "y", "completed"),
		turn(1, 2, "v", "cut"), // at the kill itself: not after it
	}
	if got, want := trail(turns, 1, "v", at(2), at(8)), "ab.a|Vb"; got != want {
		t.Errorf("trail %q, want %q", got, want)
	}
	// No turn after the return: no bar.
	if got, want := trail(turns[:4], 1, "v", at(2), at(20)), "abV"; got != want {
		t.Errorf("trail %q, want %q", got, want)
	}
}

// The first session to finish is the one whose last turn ended first, whatever order its turns
// are listed in.
func TestFirstSessionEnd(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	got := firstSessionEnd(map[int][]fleetTurn{
		1: {{end: at(9)}, {end: at(3)}},
		2: {{end: at(5)}, {end: at(7)}},
		3: {{end: at(8)}},
	})
	if !got.Equal(at(7)) {
		t.Errorf("first session end %s, want %s", got, at(7))
	}
}
