package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// adminRun runs `respgate admin ARGS` against dsn and returns its stdout and stderr.
func adminRun(t *testing.T, dsn string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = dispatch(t.Context(), append([]string{"admin"}, args...), env(map[string]string{"RESPGATE_DATABASE_URL": dsn}), &o, &e)
	return o.String(), e.String(), err
}

func mustAdmin(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	out, errOut, err := adminRun(t, dsn, args...)
	if err != nil {
		t.Fatalf("admin %v: %v\n%s", args, err, errOut)
	}
	return out
}

// post sends a Responses request with key and returns the response's id.
func post(t *testing.T, g *respgatetest.Gateway, key, body string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.URL+"/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct{ ID string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil || r.ID == "" {
		t.Fatalf("POST /v1/responses: %d %s", resp.StatusCode, b)
	}
	return r.ID
}

const adminKey = "sk-admin-PLANTED-KEY"

// TestAdminEndToEnd runs every store command of respgate admin against a store a live respgate
// wrote, on both backends.
func TestAdminEndToEnd(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "data", "respgate.db")
			if backend == "postgres" {
				dsn = pgtest.DSN(t)
			}
			testAdmin(t, dsn)
		})
	}
}

func testAdmin(t *testing.T, dsn string) {
	// A store that is not there yet (SQLite) or empty (Postgres) is created by migrate up.
	out := mustAdmin(t, dsn, "migrate", "up")
	if !strings.Contains(out, fmt.Sprintf("-> %d", latestSchema(t))) {
		t.Fatalf("migrate up: %q", out)
	}
	if out := mustAdmin(t, dsn, "migrate", "status"); !strings.Contains(out, fmt.Sprintf("schema version %d (clean), this respgate needs %d: up to date", latestSchema(t), latestSchema(t))) {
		t.Fatalf("migrate status: %q", out)
	}

	st, err := openStore(t.Context(), dsn, 4, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the gateway's own cleanups
	g := respgatetest.New(t, respgatetest.Options{Store: st})
	first := post(t, g, adminKey, `{"model":"openai/gpt-oss-sim","input":"remember: PLANTED-PROMPT"}`)
	second := post(t, g, adminKey, `{"model":"openai/gpt-oss-sim","previous_response_id":"`+first+`","input":[
		{"type":"function_call","call_id":"c1","name":"lookup","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"PLANTED-TOOL-OUTPUT"}]}`)
	other := post(t, g, "sk-someone-else", `{"model":"openai/gpt-oss-sim","input":"hi"}`)
	// An old finished response for purge, as retention would find it.
	old := store.Response{ID: "resp_admin_old", Tenant: g.Server.TenantOf(adminKey), Status: wire.StatusCompleted,
		Model: "m", CreatedAt: time.Now().Add(-48 * time.Hour), Echo: json.RawMessage(`{}`)}
	if err := st.ResponseCommit(t.Context(), &store.ResponseCommitParams{Response: old}); err != nil {
		t.Fatal(err)
	}

	// inspect: status, chain, sizes, lease; no content unless --content.
	out = mustAdmin(t, dsn, "inspect", second)
	var view struct {
		ID, Status, Tenant string
		ChainDepth         int    `json:"chain_depth"`
		PreviousResponseID string `json:"previous_response_id"`
		Input              struct {
			Count int
			Types map[string]int
		} `json:"input_items"`
		Chain []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	if view.ID != second || view.Status != "completed" || view.ChainDepth != 2 || view.PreviousResponseID != first ||
		view.Tenant != g.Server.TenantOf(adminKey) || view.Input.Types["function_call_output"] != 1 || len(view.Chain) != 2 || view.Chain[0].ID != first {
		t.Errorf("inspect: %s", out)
	}
	if strings.Contains(out, "PLANTED") {
		t.Errorf("inspect printed content without --content: %s", out)
	}
	if out := mustAdmin(t, dsn, "inspect", second, "--content"); !strings.Contains(out, "PLANTED-TOOL-OUTPUT") {
		t.Errorf("inspect --content lacks the items: %s", out)
	}
	if _, _, err := adminRun(t, dsn, "inspect", "resp_nope"); err == nil || !strings.Contains(err.Error(), `no response "resp_nope"`) {
		t.Errorf("inspect of an unknown id: %v", err)
	}

	// export: the tenant's responses as JSON Lines, redacted on request, never another tenant's.
	out = mustAdmin(t, dsn, "export", "--key", adminKey)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Contains(out, other) || !strings.Contains(out, "PLANTED-TOOL-OUTPUT") || !strings.Contains(out, `"type":"reasoning"`) {
		t.Errorf("export: %d lines\n%s", len(lines), out)
	}
	for _, l := range lines {
		var e exportLine
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.ID == "" {
			t.Errorf("export line %q: %v", l, err)
		}
	}
	red := mustAdmin(t, dsn, "export", "--key", adminKey, "--redact-reasoning", "--redact-tool-outputs")
	if strings.Contains(red, `"encrypted_content"`) || !strings.Contains(red, `"output":"[redacted]"`) {
		t.Errorf("redacted export: %s", red)
	}
	reasoning := 0
	for _, l := range strings.Split(strings.TrimSpace(red), "\n") {
		var e exportLine
		_ = json.Unmarshal([]byte(l), &e)
		// The assistant's answer may repeat what the tool said; the items themselves are blanked.
		for _, it := range append(e.Input, e.Output...) {
			switch it.Type {
			case "reasoning":
				reasoning++
				if !bytes.Contains(it.JSON, []byte(`"content":[]`)) || !bytes.Contains(it.JSON, []byte(`"summary":[]`)) {
					t.Errorf("reasoning kept its content: %s", it.JSON)
				}
			case "function_call_output":
				if bytes.Contains(it.JSON, []byte("PLANTED-TOOL-OUTPUT")) {
					t.Errorf("tool output kept: %s", it.JSON)
				}
			}
		}
	}
	if reasoning == 0 {
		t.Error("the export holds no reasoning item to redact")
	}
	out = mustAdmin(t, dsn, "export", "--tenant", g.Server.TenantOf(adminKey), "--chain", second)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[0], first) || !strings.Contains(lines[1], second) {
		t.Errorf("export --chain: %s", out)
	}
	file := filepath.Join(t.TempDir(), "export.jsonl")
	mustAdmin(t, dsn, "export", "--key", adminKey, "--out", file)
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
		t.Errorf("export --out: %v %v", fi, err)
	}
	if _, _, err := adminRun(t, dsn, "export"); err == nil || !strings.Contains(err.Error(), "--key") {
		t.Errorf("export without a tenant: %v", err)
	}

	// purge: the dry run counts what the purge then deletes.
	if out := mustAdmin(t, dsn, "purge", "--older-than", "24h", "--dry-run"); !strings.HasPrefix(out, "would delete 1 ") {
		t.Errorf("purge --dry-run: %q", out)
	}
	if out := mustAdmin(t, dsn, "purge", "--older-than", "24h"); !strings.HasPrefix(out, "deleted 1 ") {
		t.Errorf("purge: %q", out)
	}
	if _, _, err := st.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: old.Tenant, ID: old.ID}); err == nil {
		t.Error("the old response survived the purge")
	}
	if out := mustAdmin(t, dsn, "purge", "--older-than", "24h", "--dry-run"); !strings.HasPrefix(out, "would delete 0 ") {
		t.Errorf("purge --dry-run after: %q", out)
	}
	if _, _, err := adminRun(t, dsn, "purge", "--older-than", "soon"); err == nil {
		t.Error("purge with a bad duration succeeded")
	}

	// migrate down needs --yes, then reverts; up brings it back.
	if _, _, err := adminRun(t, dsn, "migrate", "down", "1"); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Errorf("migrate down without --yes: %v", err)
	}
	if out := mustAdmin(t, dsn, "migrate", "down", "1", "--yes"); !strings.Contains(out, fmt.Sprintf("%d -> %d", latestSchema(t), latestSchema(t)-1)) {
		t.Errorf("migrate down: %q", out)
	}
	if out := mustAdmin(t, dsn, "migrate", "status"); !strings.Contains(out, "1 pending") {
		t.Errorf("status after down: %q", out)
	}
	if _, _, err := adminRun(t, dsn, "inspect", second); err == nil || !strings.Contains(err.Error(), "migrate status") {
		t.Errorf("inspect on an old schema: %v", err)
	}
	if out := mustAdmin(t, dsn, "migrate", "up"); !strings.Contains(out, fmt.Sprintf("%d -> %d", latestSchema(t)-1, latestSchema(t))) {
		t.Errorf("migrate up: %q", out)
	}
}

// Every admin command and subcommand answers -h with its usage, and mistakes get one clear line.
func TestAdminHelpAndErrors(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "none.db")
	for _, args := range [][]string{{"-h"}, {"migrate", "-h"}, {"inspect", "-h"}, {"export", "-h"}, {"purge", "-h"}, {"keys", "-h"}} {
		_, errOut, err := adminRun(t, dsn, args...)
		if err == nil || !strings.Contains(errOut, "usage: respgate admin") {
			t.Errorf("admin %v: err %v, stderr %q", args, err, errOut)
		}
	}
	for args, want := range map[string]string{
		"frobnicate":           `unknown command "frobnicate"`,
		"migrate sideways":     `unknown "sideways"`,
		"migrate down":         "want 1 argument",
		"migrate down x --yes": "positive number",
		"migrate status":       "no database at",
		"inspect":              "want 1 argument",
		"purge":                "--older-than must be a positive duration",
		"keys list":            "--seal-keys-file",
	} {
		_, _, err := adminRun(t, dsn, strings.Fields(args)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("admin %s: %v, want %q", args, err, want)
		}
	}
	if _, _, err := adminRun(t, "sqlite://./x.db", "migrate", "status"); err == nil || !strings.Contains(err.Error(), "sqlite:./x.db") {
		t.Errorf("sqlite:// spelling: %v", err)
	}
}

// The keys commands walk docs/reasoning.md's rotation on a keys file, never printing a key.
func TestAdminKeysRotation(t *testing.T) {
	file := filepath.Join(t.TempDir(), "seal-keys")
	if err := os.WriteFile(file, []byte("# respgate seal keys\nk1:"+strings.Repeat("A", 43)+"=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := func(args ...string) string {
		t.Helper()
		var o, e bytes.Buffer
		err := dispatch(context.Background(), append([]string{"admin", "keys"}, append(args, "--seal-keys-file", file)...), env(nil), &o, &e)
		if err != nil {
			t.Fatalf("keys %v: %v %s", args, err, e.String())
		}
		return o.String()
	}
	keys("add", "k2")
	if out := keys("list"); out != "k1\tseals and opens\nk2\topens\nauto\topens (generated in the store; list auto:retired to retire it)\n" {
		t.Errorf("after add: %q", out)
	}
	var e bytes.Buffer
	if err := dispatch(context.Background(), []string{"admin", "keys", "retire", "k1", "--seal-keys-file", file}, env(nil), io.Discard, &e); err == nil {
		t.Error("retired the key that seals")
	}
	keys("seal", "k2")
	keys("retire", "k1")
	out := keys("list")
	if out != "k2\tseals and opens\nk1\tretired\nauto\topens (generated in the store; list auto:retired to retire it)\n" {
		t.Errorf("after rotation: %q", out)
	}
	b, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(b), "# respgate seal keys\nk2:") || strings.Contains(out, strings.Repeat("A", 43)) {
		t.Errorf("file %q", b)
	}
	// The file respgate then reads gives the ring the rotation meant.
	c := mustParse(t, nil, map[string]string{"RESPGATE_SEAL_KEYS_FILE": file})
	if len(c.server.SealKeys) != 1 || c.server.SealKeys[0].ID != "k2" || len(c.server.SealRetired) != 1 || c.server.SealRetired[0] != "k1" {
		t.Errorf("ring: %v retired %v", c.server.SealKeys, c.server.SealRetired)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("keys file mode %v", fi.Mode())
	}
}

// latestSchema is the newest schema version this build migrates to.
func latestSchema(t *testing.T) int {
	t.Helper()
	v, err := migrations.Versions(migrations.SQLite, "sqlite")
	if err != nil || len(v) == 0 {
		t.Fatalf("schema versions: %v %v", v, err)
	}
	return int(v[len(v)-1])
}
