package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/respgate/respgate/store"
)

// faults is the set of fault classes a scenario injects; the auditor accepts a stored failure
// only when its reason belongs to one of them ("every stored failure reason is true").
type faults uint

const (
	fUpstream faults = 1 << iota // vLLM refused, stalled, cut, malformed, too large
	fClient                      // a client left (FIN, RST) or stopped reading
	fDB                          // Postgres down, cut or stalled
	fKill                        // the gateway process was killed
	fShutdown                    // SIGTERM drain deadline
	fDelete                      // concurrent deletes
	// fNoAmbiguity: the scenario lets a late COMMIT land before the gateway reads the outcome
	// back, so "told failed, stored completed" is a violation even with a database fault.
	fNoAmbiguity
)

// sweepMessage marks what the auditor's own sweep failed (see audit).
const sweepMessage = "audit sweep: lease expired"

type row struct {
	id, status, prev, conv string
	errCode, errMsg        string
}

// violation is one broken invariant.
type violation struct{ rule, detail string }

// audit reconciles the database with every client transcript and the simulator's request log.
// It runs after the scenario, with the gateway stopped (or killed) and the proxies clean. It is
// the only judge of a scenario: scenarios inject faults and record, they do not assert.
func (e *env) audit(injected faults) []violation {
	var vs []violation
	bad := func(rule, format string, args ...any) {
		vs = append(vs, violation{rule, fmt.Sprintf(format, args...)})
	}
	d := e.db()
	defer d.Close()
	ctx := context.Background()
	e.mu.Lock()
	for _, s := range e.setup {
		bad("scenario-reached-its-phase", "%s", s)
	}
	e.mu.Unlock()

	// 1. Before the sweep: only a dead gateway or a lost database may leave a lease behind;
	// a gateway that stopped in order ends every turn it started.
	pre := e.rows(d)
	for _, r := range pre {
		if (r.status == "in_progress" || r.status == "queued") && injected&(fDB|fKill) == 0 {
			bad("no-stuck-turn", "%s is %s after the gateway stopped, with no database fault or kill", r.id, r.status)
		}
	}
	// 1b. Every background response came to a true terminal state by itself, in time.
	vs = append(vs, e.auditBackground(d, pre)...)
	// 2. Sweep as a gateway would once every lease has expired; then nothing may be in progress.
	st, err := e.openStore(e.directDSN)
	if err != nil {
		bad("audit", "open store: %v", err)
		return vs
	}
	defer st.Close()
	if _, err := st.ResponseSweep(ctx, &store.ResponseSweepParams{Now: time.Now().Add(leaseTTL + time.Hour), Message: sweepMessage}); err != nil {
		bad("audit", "sweep: %v", err)
	}
	rows := e.rows(d)
	byID := map[string]row{}
	for _, r := range rows {
		byID[r.id] = r
		if r.status == "in_progress" || r.status == "queued" {
			bad("swept", "%s still %s after the leases were swept", r.id, r.status)
		}
	}
	e.mu.Lock()
	trs := slices.Clone(e.trs)
	e.mu.Unlock()

	// 3. Deletions the client saw acknowledged stay deleted.
	deleted := map[string]bool{}
	for _, tr := range trs {
		if tr.status != 200 {
			continue
		}
		switch tr.kind {
		case "delete-response":
			deleted[tr.id] = true
			if _, ok := byID[tr.id]; ok {
				bad("deleted-stays-deleted", "response %s was deleted (200) and is stored again as %s", tr.id, byID[tr.id].status)
			}
			var n int
			_ = d.QueryRow(e.q(`SELECT count(*) FROM items WHERE response_id = ?`), tr.id).Scan(&n)
			if n > 0 {
				bad("deleted-stays-deleted", "response %s was deleted and %d of its items are stored", tr.id, n)
			}
		case "delete-conversation":
			deleted[tr.id] = true
			var n int
			_ = d.QueryRow(e.q(`SELECT count(*) FROM conversations WHERE id = ?`), tr.id).Scan(&n)
			if n > 0 {
				bad("deleted-stays-deleted", "conversation %s was deleted (200) and is stored again", tr.id)
			}
		}
	}

	// 4. What a client saw at the end of a turn is what is stored.
	seen := map[string]*transcript{}
	for _, tr := range trs {
		if (tr.kind != "stream" && tr.kind != "create") || tr.id == "" {
			continue
		}
		if tr.terminal != "" {
			seen[tr.id] = tr
		}
		r, ok := byID[tr.id]
		if deleted[tr.id] {
			continue
		}
		switch {
		case tr.terminal == "" && tr.kind == "stream" && !tr.faulted && injected&(fKill) == 0:
			last := ""
			if len(tr.events) > 0 {
				last = tr.events[len(tr.events)-1]
			}
			bad("one-terminal", "stream %s ended without a terminal event (%d events, the last %s; transport %q; stored %s %s %q), and nothing it did or suffered excuses it",
				tr.id, len(tr.events), last, tr.transport, r.status, r.errCode, r.errMsg)
		case tr.terminal == "":
		case !ok:
			bad("seen-is-stored", "%s: the client saw %s and nothing is stored", tr.id, tr.terminal)
		case r.status != tr.terminal && !(ambiguous(tr) && injected&fDB != 0 && injected&fNoAmbiguity == 0):
			bad("seen-is-stored", "%s: the client saw %s (%s %q), stored %s (%s %q)", tr.id, tr.terminal, tr.errCode, tr.errMsg, r.status, r.errCode, r.errMsg)
		case r.status != tr.terminal:
		case tr.terminal == "failed" && (r.errCode != tr.errCode || r.errMsg != tr.errMsg) && !swept(r):
			bad("failure-reason", "%s: the client was told %s %q, stored %s %q", tr.id, tr.errCode, tr.errMsg, r.errCode, r.errMsg)
		}
		if ok && tr.terminal == "completed" && r.status == "completed" {
			items := e.items(d, tr.id, "output")
			if len(items) != len(tr.output) {
				bad("seen-is-stored", "%s: the client saw %d output items, %d are stored", tr.id, len(tr.output), len(items))
			} else {
				for i := range items {
					if !jsonEqual(items[i], tr.output[i]) {
						bad("seen-is-stored", "%s: output item %d differs from what the client saw:\nstored %s\nseen   %s", tr.id, i, clip(items[i]), clip(tr.output[i]))
					}
				}
			}
		}
	}

	// 5. No item is stored twice: one row per (response, role, position), item ids unique within
	// a response and within a conversation.
	for _, q := range []string{
		`SELECT response_id || '/' || role || '/' || position, count(*) FROM items WHERE response_id IS NOT NULL GROUP BY response_id, role, position HAVING count(*) > 1`,
		`SELECT response_id || ' ' || id, count(*) FROM items WHERE response_id IS NOT NULL GROUP BY response_id, id HAVING count(*) > 1`,
		`SELECT ci.conversation_id || ' ' || i.id, count(*) FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk GROUP BY ci.conversation_id, i.id HAVING count(*) > 1`,
	} {
		rs, err := d.Query(q)
		if err != nil {
			bad("audit", "duplicates query: %v", err)
			continue
		}
		for rs.Next() {
			var k string
			var n int
			_ = rs.Scan(&k, &n)
			bad("no-duplicate-item", "%s stored %d times", k, n)
		}
		rs.Close()
	}

	// 6. Every stored failure reason is true: it is what the client was told, or it names a fault
	// the scenario injected.
	for _, r := range rows {
		if r.status != "failed" {
			continue
		}
		if tr, ok := seen[r.id]; ok && tr.terminal == "failed" {
			continue // compared in 4
		}
		if !reasonFits(r, injected) {
			bad("failure-reason", "%s failed with %s %q, but the scenario injected none of the faults that explain it", r.id, r.errCode, r.errMsg)
		}
	}

	// 7. Every continuation of a stored response sends upstream exactly the stored history.
	n := 0
	for _, r := range rows {
		if r.status != "completed" || r.conv != "" || n >= 8 {
			continue
		}
		n++
		if v := e.auditContinuation(d, r.id); v != "" {
			bad("continuation-replays-stored-history", "%s: %s", r.id, v)
		}
	}
	return vs
}

// Messages of engine/commit.go the auditor recognises.
const (
	msgNotStored    = "The response could not be stored: the store did not accept it."
	msgSweptExpired = "The response's lease expired before it finished: the gateway serving it stopped, or lost the store, before storing it."
)

// ambiguous: the client was told its response could not be stored, after a commit whose outcome
// the gateway could not learn (a lost or late COMMIT reply). The store may hold it completed:
// the transaction went through after the gateway gave up on it.
func ambiguous(tr *transcript) bool { return tr.terminal == "failed" && tr.errMsg == msgNotStored }

// swept: the record was failed by a lease sweep (the server's or the auditor's). When a lease
// expired before the gateway's own failure record landed, the store keeps the sweeper's
// (idempotent commit: same status, nothing changes), so the stored reason may differ from the
// one the client was told; both are failures, and the lease did expire.
func swept(r row) bool { return r.errMsg == msgSweptExpired || r.errMsg == sweepMessage }

// reasonFits says whether a stored failure is explained by the injected fault classes.
func reasonFits(r row, injected faults) bool {
	m := r.errMsg
	switch {
	case r.errCode == "client_disconnected":
		return injected&(fClient|fKill) != 0
	case r.errCode == "response_deleted":
		return injected&fDelete != 0
	case r.errCode == "shutting_down" || strings.Contains(m, "gateway shut down"):
		return injected&fShutdown != 0
	case strings.Contains(m, "lease") || m == sweepMessage:
		return injected&(fDB|fKill|fClient) != 0
	case r.errCode == "store_unavailable" || strings.Contains(m, "could not be stored"):
		return injected&fDB != 0
	case strings.Contains(strings.ToLower(m), "upstream") || strings.HasPrefix(r.errCode, "upstream") || r.errCode == "bad_upstream_response":
		return injected&fUpstream != 0
	}
	return false
}

func (e *env) rows(d *sql.DB) []row {
	rs, err := d.Query(`SELECT id, status, coalesce(previous_response_id, ''), coalesce(conversation_id, ''), coalesce(CAST(error AS TEXT), '') FROM responses`)
	if err != nil {
		e.t.Errorf("audit: read responses: %v", err)
		return nil
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var errJSON string
		if err := rs.Scan(&r.id, &r.status, &r.prev, &r.conv, &errJSON); err != nil {
			e.t.Errorf("audit: scan: %v", err)
			return out
		}
		var ej struct{ Code, Message string }
		if errJSON != "" && errJSON != "null" {
			_ = json.Unmarshal([]byte(errJSON), &ej)
		}
		r.errCode, r.errMsg = ej.Code, ej.Message
		out = append(out, r)
	}
	return out
}

func (e *env) items(d *sql.DB, id, role string) []json.RawMessage {
	rs, err := d.Query(e.q(`SELECT data FROM items WHERE response_id = ? AND role = ? ORDER BY position`), id, role)
	if err != nil {
		e.t.Errorf("audit: read items: %v", err)
		return nil
	}
	defer rs.Close()
	var out []json.RawMessage
	for rs.Next() {
		var b []byte
		_ = rs.Scan(&b)
		out = append(out, json.RawMessage(b))
	}
	return out
}

// auditContinuation continues response id through a fault-free gateway on the same store and
// compares what the simulator received with the stored chain: each ancestor's input then output
// items, oldest first, then the new input.
func (e *env) auditContinuation(d *sql.DB, id string) string {
	var want []string
	for cur := id; cur != ""; {
		var prev string
		if err := d.QueryRow(e.q(`SELECT coalesce(previous_response_id, '') FROM responses WHERE id = ?`), cur).Scan(&prev); err != nil {
			return "" // a deleted ancestor: the continuation is a 400 by design, nothing to compare
		}
		var turn []string
		for _, role := range []string{"input", "output"} {
			for _, it := range e.items(d, cur, role) {
				turn = append(turn, project(it)...)
			}
		}
		want = append(turn, want...)
		cur = prev
	}
	e.mu.Lock()
	e.audits++
	marker := fmt.Sprintf("audit continuation %d", e.audits)
	e.mu.Unlock()
	base := e.cleanGateway()
	res := e.do("audit", "POST", base, "/v1/responses", body(harmony, marker, false, fmt.Sprintf(`"previous_response_id":%q`, id)))
	if res.status != 200 {
		return fmt.Sprintf("continuation answered %d %s %q", res.status, res.errCode, res.errMsg)
	}
	var got []string
	found := false
	for _, r := range e.sim.Requests() {
		if r.Method != "POST" || !bytes.Contains(r.Body, []byte(marker)) {
			continue
		}
		var req struct{ Input []json.RawMessage }
		_ = json.Unmarshal(r.Body, &req)
		for _, it := range req.Input {
			got = append(got, project(it)...)
		}
		found = true
	}
	if !found {
		return "the continuation never reached the simulator"
	}
	want = append(want, "message/user:"+marker)
	if !slices.Equal(got, want) {
		return fmt.Sprintf("upstream got\n  %s\nstored history is\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	return ""
}

// project reduces an item to what must reach the model unchanged: its type, role and texts
// (message and reasoning text, function name and arguments, tool output).
func project(raw json.RawMessage) []string {
	var it struct {
		Type      string `json:"type"`
		Role      string `json:"role"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Output    any    `json:"output"`
		Content   any    `json:"content"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		return []string{"!" + string(raw)}
	}
	if it.Type == "" {
		it.Type = "message"
	}
	var texts []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			texts = append(texts, x)
		case []any:
			for _, y := range x {
				walk(y)
			}
		case map[string]any:
			if s, ok := x["text"].(string); ok {
				texts = append(texts, s)
			}
		}
	}
	walk(it.Content)
	if it.Type == "reasoning" && len(texts) == 0 {
		return nil // nothing readable to replay (summary-only reasoning is not replayed)
	}
	return []string{fmt.Sprintf("%s/%s:%s%s%s%v", it.Type, it.Role, strings.Join(texts, "|"), it.Name, it.Arguments, orEmpty(it.Output))}
}

func orEmpty(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
