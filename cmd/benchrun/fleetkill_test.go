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

// judgeKill counts, among the victim's chains (its key's first choice) that ran after its
// return, those that came back to it for a turn or more and those on it at their last turn; a
// chain that came back and left again in the drain is the one and not the other.
func TestJudgeKillCountsChainsThatCameBack(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var turns []fleetTurn
	add := func(session int, replicas ...string) {
		for i, r := range replicas {
			start := []int{5, 12, 22, 25}[i]
			turns = append(turns, fleetTurn{session: session, turn: i + 1, start: at(start), end: at(start + 1), replica: r, status: "completed"})
		}
	}
	add(1, "v", "x", "v", "x") // back, then off again at the end
	add(2, "v", "x", "v", "v") // back for good
	add(3, "v", "x", "x", "x") // never back
	add(4, "y", "y", "y")      // not the victim's
	add(5, "v", "x")
	// Back on it in the second after the return (before settle), then off again.
	turns = append(turns, fleetTurn{session: 5, turn: 3, start: at(20).Add(time.Millisecond), end: at(22), replica: "v", status: "completed"},
		fleetTurn{session: 5, turn: 4, start: at(25), end: at(26), replica: "x", status: "completed"})
	first := map[int]string{1: "v", 2: "v", 3: "v", 4: "y", 5: "v"}
	k := &fleetKill{Victim: "v"}
	if err := (&fleetRun{}).judgeKill(t.Context(), k, turns, first, at(10), at(20)); err != nil {
		t.Fatal(err)
	}
	got := [...]int{k.FirstOnVictim, k.BackOf, k.CameBack, k.Back, k.BackSteady, k.BackSteadyOf, k.HomeOnVictim, k.MovedVictim, k.MovedOther, len(k.NotBack)}
	want := [...]int{4, 4, 3, 1, 2, 3, 4, 4, 0, 3}
	if got != want {
		t.Errorf("first, back of, came back, back, steady, steady of, home on victim, moved victim, moved other, not back = %v, want %v", got, want)
	}
}
