package store

import (
	"errors"
	"testing"

	"github.com/respgate/respgate/wire"
)

func item(id, text string) wire.Item {
	return wire.Item{ID: id, Type: wire.TypeMessage, JSON: []byte(`{"id":"` + id + `","type":"message","role":"user","content":"` + text + `"}`)}
}

// TurnItems keeps ids and content digests; TurnItemConflict refuses an id of the turn with other
// content (insignificant whitespace aside), names the item, and refuses nothing for no turn.
func TestTurnItemConflict(t *testing.T) {
	if got := TurnItems(nil); got != "" {
		t.Fatalf("TurnItems(nil) = %q, want \"\"", got)
	}
	turn := TurnItems([]wire.Item{item("a", "one"), item("b", "two")})
	spaced := item("b", "two")
	spaced.JSON = []byte(`{"id": "b", "type": "message", "role": "user", "content": "two"}`)
	for _, tc := range []struct {
		name  string
		turn  string
		items []wire.Item
		want  int // index refused, -1 none
	}{
		{"no turn", "", []wire.Item{item("a", "other")}, -1},
		{"an unreadable turn", "{", []wire.Item{item("a", "other")}, -1},
		{"other ids", turn, []wire.Item{item("c", "x"), item("d", "y")}, -1},
		{"the same content", turn, []wire.Item{item("a", "one")}, -1},
		{"the same content spaced", turn, []wire.Item{spaced}, -1},
		{"other content", turn, []wire.Item{item("c", "x"), item("b", "changed")}, 1},
		{"the first of two", turn, []wire.Item{item("a", "changed"), item("b", "changed")}, 0},
	} {
		err := TurnItemConflict(tc.turn, tc.items)
		var ce *ItemIDConflictError
		switch {
		case tc.want < 0 && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case tc.want >= 0 && (!errors.As(err, &ce) || ce.Index != tc.want || !ce.InTurn || !errors.Is(err, ErrConflict)):
			t.Errorf("%s: %v, want an InTurn conflict of item %d", tc.name, err, tc.want)
		}
	}
	if msg := (&ItemIDConflictError{Index: 2, InTurn: true}).Error(); msg != "store: item 2 has the id of an item of the turn in progress with other content" {
		t.Errorf("InTurn message %q", msg)
	}
}
