package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/respgate/respgate/wire"
)

// Errors of the status guards, the same from every backend.
var (
	// ErrLeaseHeld: ResponseDelete of a response in progress whose lease is live.
	ErrLeaseHeld = fmt.Errorf("in progress with a live lease: %w", ErrConflict)
	// ErrTurnHeld: ConversationDelete while a turn holds the conversation.
	ErrTurnHeld = fmt.Errorf("a turn holds it: %w", ErrConflict)
)

// ItemIDConflictError is ConversationItemAppend's refusal of Items[Index]: the conversation
// already lists an item with its id but other content, or an earlier item of Items has its id
// and other content. A conversation never holds two items with one id, which GET and DELETE of
// the id could not tell apart (issue 38 item 3). It matches ErrConflict with errors.Is.
type ItemIDConflictError struct {
	Index int
	// InTurn: the id is in the input of the turn that holds the conversation's lease, which its
	// commit will append (TurnItemConflict); otherwise the conversation lists it, or Items does.
	InTurn bool
}

func (e *ItemIDConflictError) Error() string {
	if e.InTurn {
		return fmt.Sprintf("store: item %d has the id of an item of the turn in progress with other content", e.Index)
	}
	return fmt.Sprintf("store: item %d has the id of an item with other content", e.Index)
}

func (e *ItemIDConflictError) Unwrap() error { return ErrConflict }

// ItemIDConflict is ConversationItemAppend's check, which every backend runs inside its appending
// transaction once the conversation is locked: held are the conversation's items whose id is one
// of items' ids (every occurrence). Content is compared as compact JSON (insignificant whitespace
// aside, byte for byte), as the conversations door compares it.
func ItemIDConflict(held, items []wire.Item) error {
	seen := make(map[string][][]byte, len(held)+len(items))
	for _, it := range held {
		seen[it.ID] = append(seen[it.ID], compactJSON(it.JSON))
	}
	for i, it := range items {
		body := compactJSON(it.JSON)
		for _, prior := range seen[it.ID] {
			if !bytes.Equal(prior, body) {
				return &ItemIDConflictError{Index: i}
			}
		}
		seen[it.ID] = append(seen[it.ID], body)
	}
	return nil
}

// ItemIDs is the ids of items, for the query that finds the items ItemIDConflict compares.
func ItemIDs(items []wire.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

func compactJSON(raw []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// beginStatus is the status ResponseBegin stores: in_progress when empty, else in_progress or
// queued; anything else is an error.
func beginStatus(s wire.Status) (wire.Status, error) {
	switch s {
	case "":
		return wire.StatusInProgress, nil
	case wire.StatusInProgress, wire.StatusQueued:
		return s, nil
	}
	return "", fmt.Errorf("status %q is not in_progress or queued", s)
}

// CommitAction is what ResponseCommit does to the stored response record.
type CommitAction int

const (
	// CommitInsert: no record is stored; insert it.
	CommitInsert CommitAction = iota
	// CommitUpdate: the stored record is in progress; finish it.
	CommitUpdate
	// CommitNoop: the stored record is terminal with the same status; change nothing.
	CommitNoop
)

// CommitCheck is the check ResponseCommit makes before anything: the final status is terminal.
func CommitCheck(p *ResponseCommitParams) error {
	if !p.Response.Status.Terminal() {
		return fmt.Errorf("status %q is not terminal", p.Response.Status)
	}
	return nil
}

// CommitDecision decides ResponseCommit from the stored status (empty: no record) and p, as
// store.Store documents: a terminal record is a no-op with the same status and ErrConflict with
// another, and a Begun commit whose record is gone is ErrNotFound (a commit never resurrects a
// deleted response).
func CommitDecision(stored wire.Status, p *ResponseCommitParams) (CommitAction, error) {
	switch {
	case stored == "" && p.Begun:
		return 0, fmt.Errorf("deleted since begun: %w", ErrNotFound)
	case stored == "":
		return CommitInsert, nil
	case !stored.Terminal():
		return CommitUpdate, nil
	case stored != p.Response.Status:
		return 0, fmt.Errorf("stored as %s: %w", stored, ErrConflict)
	}
	return CommitNoop, nil
}

// TurnAcquireResult is what ConversationTurnAcquire's statement found.
type TurnAcquireResult struct {
	Exists bool // the conversation exists for the tenant
	Taken  bool // the lease is now the caller's
}

// TurnAcquireDecision is ConversationTurnAcquire's result from what its statement found.
func TurnAcquireDecision(r TurnAcquireResult) error {
	switch {
	case !r.Exists:
		return ErrNotFound
	case !r.Taken:
		return ErrConflict
	}
	return nil
}

// sweepError is the error object ResponseSweep stores on a response it fails.
func sweepError(message string) (json.RawMessage, error) {
	return json.Marshal(wire.ErrorObject{Code: wire.ErrServer, Message: message})
}

// TurnItems is what a conversation's turn lease keeps of its turn's input
// (ConversationTurnAcquireParams.Items), as JSON text: each item's id and the SHA-256 of its
// compact JSON. "" when there is none. The turn's commit appends that input to the conversation,
// so while the lease is live ConversationItemAppend refuses an item with one of these ids and
// other content (TurnItemConflict), as it refuses one the conversation already lists.
func TurnItems(items []wire.Item) string {
	if len(items) == 0 {
		return ""
	}
	held := make([][2]string, len(items))
	for i, it := range items {
		held[i] = [2]string{it.ID, contentSum(it.JSON)}
	}
	b, _ := json.Marshal(held) // strings only: cannot fail
	return string(b)
}

// TurnItemConflict is ConversationItemAppend's check against the live turn's input: turn is the
// lease's TurnItems. An item with the id of one of them and other content is an
// *ItemIDConflictError with InTurn set. A turn that cannot be read refuses nothing (it was
// written by TurnItems).
func TurnItemConflict(turn string, items []wire.Item) error {
	if turn == "" {
		return nil
	}
	var held [][2]string
	if json.Unmarshal([]byte(turn), &held) != nil {
		return nil
	}
	sums := make(map[string]string, len(held))
	for _, h := range held {
		sums[h[0]] = h[1]
	}
	for i, it := range items {
		if sum, ok := sums[it.ID]; ok && sum != contentSum(it.JSON) {
			return &ItemIDConflictError{Index: i, InTurn: true}
		}
	}
	return nil
}

// contentSum is the hex SHA-256 of raw as compact JSON.
func contentSum(raw []byte) string {
	sum := sha256.Sum256(compactJSON(raw))
	return hex.EncodeToString(sum[:])
}
