package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/respgate/respgate/migrations"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/wire"
)

// adminUsage is `respgate admin -h`.
const adminUsage = `usage: respgate admin [--database-url URL] COMMAND [ARGS]

Operator commands against the configured store (RESPGATE_DATABASE_URL, or --database-url). They
print results on stdout, errors on stderr, and never print a key, a password or, unless asked
with --content, any stored content.

  migrate status            the schema version applied and the one this respgate needs
  migrate up                apply every pending migration
  migrate down N --yes      revert the last N migrations (drops what they added, data included)
  inspect RESPONSE_ID       a response's status, lease, sizes and chain (--content adds its items)
  export                    a tenant's responses, or one chain, as JSON Lines
  purge --older-than D      delete finished responses older than D, as --retention does (--dry-run counts)
  keys list|add|seal|retire the sealing keys of a --seal-keys-file (docs/reasoning.md, rotation)

Run respgate admin COMMAND -h for a command's flags.
`

// runAdmin runs `respgate admin ARGS`: results go to stdout, usage and errors to stderr.
func runAdmin(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("respgate admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, adminUsage) }
	dsn := fs.String("database-url", envOr(lookupEnv, "RESPGATE_DATABASE_URL", "sqlite:./data/respgate.db"), "the store (RESPGATE_DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	a := &admin{dsn: *dsn, lookupEnv: lookupEnv, out: stdout, errOut: stderr}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("admin: name a command (migrate, inspect, export, purge, keys)")
	}
	switch rest[0] {
	case "migrate":
		return a.migrate(ctx, rest[1:])
	case "inspect":
		return a.inspect(ctx, rest[1:])
	case "export":
		return a.export(ctx, rest[1:])
	case "purge":
		return a.purge(ctx, rest[1:])
	case "keys":
		return a.keys(rest[1:])
	}
	return fmt.Errorf("admin: unknown command %q (want migrate, inspect, export, purge or keys; respgate admin -h lists them)", rest[0])
}

func envOr(lookupEnv func(string) (string, bool), name, def string) string {
	if v, ok := lookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// admin is one `respgate admin` invocation.
type admin struct {
	dsn       string
	lookupEnv func(string) (string, bool)
	out       io.Writer
	errOut    io.Writer
}

// flags is a subcommand's flag set: -h prints usage, the synopsis and its flags.
func (a *admin) flags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("respgate admin "+name, flag.ContinueOnError)
	fs.SetOutput(a.errOut)
	fs.Usage = func() {
		fmt.Fprintf(a.errOut, "usage: respgate admin %s\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args with fs and checks the number of positional arguments.
func parse(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	// Flags may follow the positional arguments (inspect resp_1 --content).
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != positional {
		fs.Usage()
		return nil, fmt.Errorf("%s: want %d argument(s), got %d", fs.Name(), positional, len(pos))
	}
	return pos, nil
}

// migrationSet names a backend's embedded migration files.
type migrationSet struct {
	files embed.FS
	dir   string
}

// migrationDriver opens golang-migrate on the configured database without applying anything.
func (a *admin) migrationDriver() (database.Driver, migrationSet, error) {
	switch {
	case isPostgresURL(a.dsn):
		d, err := postgres.MigrationDriver(a.dsn)
		return d, migrationSet{migrations.Postgres, migrations.PostgresDir}, err
	case strings.HasPrefix(a.dsn, "sqlite:"):
		path, err := sqlitePath(a.dsn)
		if err != nil {
			return nil, migrationSet{}, err
		}
		if path == sqlite.Memory {
			return nil, migrationSet{}, errors.New("admin: sqlite::memory: is private to one process; point --database-url at the file respgate uses")
		}
		d, err := sqlite.MigrationDriver(path)
		return d, migrationSet{migrations.SQLite, migrations.SQLiteDir}, err
	}
	return nil, migrationSet{}, errors.New("admin: --database-url (RESPGATE_DATABASE_URL) must be a postgres://, postgresql:// or sqlite: URL")
}

// newSQLiteFile reports whether the configured store is a SQLite file that does not exist yet,
// and its absolute path.
func (a *admin) newSQLiteFile() (string, bool) {
	if !strings.HasPrefix(a.dsn, "sqlite:") {
		return "", false
	}
	path, err := sqlitePath(a.dsn)
	if err != nil || path == sqlite.Memory {
		return "", false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	_, err = os.Stat(abs)
	return abs, errors.Is(err, os.ErrNotExist)
}

// schema returns the applied schema version, whether it is dirty, and the latest this binary has.
func (a *admin) schema() (applied uint, dirty bool, latest uint, err error) {
	drv, set, err := a.migrationDriver()
	if err != nil {
		return 0, false, 0, err
	}
	versions, err := migrations.Versions(set.files, set.dir)
	if err != nil {
		_ = drv.Close()
		return 0, false, 0, err
	}
	applied, dirty, err = migrations.Status(set.files, set.dir, drv)
	return applied, dirty, versions[len(versions)-1], err
}

func (a *admin) migrate(ctx context.Context, args []string) error {
	fs := a.flags("migrate", "migrate status | up | down N --yes")
	yes := fs.Bool("yes", false, "confirm migrate down, which drops what the reverted versions added, data included")
	if len(args) == 0 {
		fs.Usage()
		return errors.New("admin migrate: name status, up or down N")
	}
	verb := args[0]
	want := map[string]int{"status": 0, "up": 0, "down": 1}
	n, ok := want[verb]
	if !ok {
		fs.Usage()
		return fmt.Errorf("admin migrate: unknown %q (want status, up or down N)", verb)
	}
	pos, err := parse(fs, args[1:], n)
	if err != nil {
		return err
	}
	steps := 0
	if verb == "down" {
		if steps, err = strconv.Atoi(pos[0]); err != nil || steps <= 0 {
			return fmt.Errorf("admin migrate down: N must be a positive number of versions, got %q", pos[0])
		}
	}
	if path, ok := a.newSQLiteFile(); ok && verb == "up" {
		// A store that does not exist yet: create it as respgate would at its first start.
		st, err := openStore(ctx, a.dsn, 1, slog.Default())
		if err != nil {
			return err
		}
		_ = st.Close()
		fmt.Fprintf(a.out, "created %s; schema version 0 -> %d\n", path, schemaVersion(a.dsn))
		return nil
	}
	before, dirty, latest, err := a.schema()
	if err != nil {
		return err
	}
	switch verb {
	case "status":
		state := "clean"
		if dirty {
			state = "DIRTY: a migration failed; fix its cause, then force the version back (docs/operations.md)"
		}
		pending := "up to date"
		if before < latest {
			pending = fmt.Sprintf("%d pending: run respgate admin migrate up", latest-before)
		} else if before > latest {
			pending = "newer than this respgate: it was migrated by a later release"
		}
		fmt.Fprintf(a.out, "schema version %d (%s), this respgate needs %d: %s\n", before, state, latest, pending)
		return nil
	case "up":
		drv, set, err := a.migrationDriver()
		if err != nil {
			return err
		}
		if err := migrations.Up(set.files, set.dir, drv); err != nil {
			return err
		}
		fmt.Fprintf(a.out, "schema version %d -> %d\n", before, latest)
		return nil
	}
	if uint(steps) > before {
		return fmt.Errorf("admin migrate down: only %d versions are applied, cannot revert %d", before, steps)
	}
	if !*yes {
		return fmt.Errorf("admin migrate down %d drops what versions %d..%d added, data included: add --yes to do it", steps, before-uint(steps)+1, before)
	}
	drv, set, err := a.migrationDriver()
	if err != nil {
		return err
	}
	if err := migrations.Down(set.files, set.dir, drv, steps); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "schema version %d -> %d\n", before, before-uint(steps))
	return nil
}

// open opens the store for the commands that read or delete records, after checking that its
// schema is the one this binary needs (so opening migrates nothing behind the operator's back).
func (a *admin) open(ctx context.Context) (store.Store, error) {
	applied, dirty, latest, err := a.schema()
	if err != nil {
		return nil, err
	}
	if dirty || applied != latest {
		return nil, fmt.Errorf("admin: the schema is at version %d (dirty: %v), this respgate needs %d: run respgate admin migrate status", applied, dirty, latest)
	}
	return openStore(ctx, a.dsn, 4, slog.Default())
}

// tenant resolves --key (a client API key, turned into its tenant as the server does) or
// --tenant (the fingerprint itself).
func (a *admin) tenant(ctx context.Context, st store.Store, key, tenant string) (string, error) {
	switch {
	case key != "" && tenant != "":
		return "", errors.New("admin: give --key or --tenant, not both")
	case tenant != "":
		return tenant, nil
	case key == "":
		return "", errors.New("admin: name the tenant with --key (a client API key; the empty key's tenant is --key='') or --tenant (its fingerprint, as inspect prints it)")
	}
	secret, err := st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: store.SecretTenantHMAC,
		Generate: func() ([]byte, error) {
			return nil, errors.New("admin: this store has no tenant secret yet: respgate never served from it")
		}})
	if err != nil {
		return "", err
	}
	// As server.tenantOf: HMAC-SHA256 of the key under the server secret.
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)), nil
}

// itemStats is what inspect shows of a list of items without their content.
type itemStats struct {
	Count int            `json:"count"`
	Bytes int            `json:"bytes"`
	Types map[string]int `json:"types,omitempty"`
}

func statsOf(items []wire.Item) itemStats {
	s := itemStats{Count: len(items), Types: map[string]int{}}
	for _, it := range items {
		s.Bytes += len(it.JSON)
		s.Types[it.Type]++
	}
	return s
}

func (a *admin) inspect(ctx context.Context, args []string) error {
	fs := a.flags("inspect", "inspect RESPONSE_ID [--content]")
	content := fs.Bool("content", false, "also print the response's input and output items (stored content: prompts, answers, reasoning)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	st, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	adm, ok := st.(store.Admin)
	if !ok {
		return fmt.Errorf("admin: %T cannot be inspected", st)
	}
	loc, err := adm.ResponseLocate(ctx, &store.ResponseLocateParams{ID: id})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("admin inspect: no response %q in this store", id)
	}
	if err != nil {
		return err
	}
	chain, err := st.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: loc.Tenant, ID: id})
	if err != nil {
		return err
	}
	type turn struct {
		ID          string     `json:"id"`
		Status      string     `json:"status"`
		CreatedAt   time.Time  `json:"created_at"`
		CompletedAt *time.Time `json:"completed_at,omitempty"`
		Input       itemStats  `json:"input_items"`
		Output      itemStats  `json:"output_items"`
	}
	target := chain.Turns[len(chain.Turns)-1]
	r := target.Response
	view := map[string]any{
		"id": r.ID, "tenant": loc.Tenant, "status": r.Status, "model": r.Model,
		"created_at": r.CreatedAt, "completed_at": r.CompletedAt,
		"previous_response_id": r.PreviousResponseID, "conversation_id": r.ConversationID,
		"input_items": statsOf(target.Input), "output_items": statsOf(target.Output),
		"chain_depth": len(chain.Turns),
	}
	if loc.LeaseOwner != "" || loc.LeaseExpiresAt != nil {
		view["lease"] = map[string]any{"owner": loc.LeaseOwner, "expires_at": loc.LeaseExpiresAt,
			"expired": loc.LeaseExpiresAt != nil && loc.LeaseExpiresAt.Before(time.Now())}
	}
	if len(r.Error) > 0 {
		var e struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(r.Error, &e) // only the code: the message may quote content
		view["error_code"] = e.Code
	}
	var lineage []turn
	for _, t := range chain.Turns {
		lineage = append(lineage, turn{ID: t.Response.ID, Status: string(t.Response.Status), CreatedAt: t.Response.CreatedAt,
			CompletedAt: t.Response.CompletedAt, Input: statsOf(t.Input), Output: statsOf(t.Output)})
	}
	view["chain"] = lineage
	if chain.Missing != "" {
		view["chain_missing"] = chain.Missing
	}
	if *content {
		view["input"], view["output"] = target.Input, target.Output
	}
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(view)
}

// exportLine is one response of an export.
type exportLine struct {
	ID                 string          `json:"id"`
	Status             wire.Status     `json:"status"`
	Model              string          `json:"model"`
	CreatedAt          time.Time       `json:"created_at"`
	CompletedAt        *time.Time      `json:"completed_at,omitempty"`
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	ConversationID     string          `json:"conversation_id,omitempty"`
	Usage              json.RawMessage `json:"usage,omitempty"`
	Error              json.RawMessage `json:"error,omitempty"`
	Input              []wire.Item     `json:"input"`
	Output             []wire.Item     `json:"output"`
}

func (a *admin) export(ctx context.Context, args []string) error {
	fs := a.flags("export", "export (--key KEY | --tenant FINGERPRINT) [--chain RESPONSE_ID] [--redact-reasoning] [--redact-tool-outputs] [--out FILE]")
	key := fs.String("key", "", "the tenant's client API key (never printed)")
	tenant := fs.String("tenant", "", "the tenant's fingerprint, as inspect prints it")
	chainID := fs.String("chain", "", "export only this response's previous_response_id chain, oldest first")
	redactReasoning := fs.Bool("redact-reasoning", false, "empty the content and summary of reasoning items and drop their encrypted_content")
	redactTools := fs.Bool("redact-tool-outputs", false, "replace the output of function_call_output items with \"[redacted]\"")
	outPath := fs.String("out", "", "write to this file (created 0600) instead of stdout")
	keySet := false
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { keySet = keySet || f.Name == "key" })
	st, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	k := *key
	if !keySet {
		k = ""
	}
	if !keySet && *tenant == "" {
		return errors.New("admin export: name the tenant with --key (a client API key; --key='' is the keyless tenant) or --tenant (its fingerprint)")
	}
	var ten string
	if keySet {
		ten, err = a.tenant(ctx, st, k, "")
		if *tenant != "" {
			err = errors.New("admin export: give --key or --tenant, not both")
		}
	} else {
		ten = *tenant
	}
	if err != nil {
		return err
	}
	w := a.out
	if *outPath != "" {
		f, err := os.OpenFile(*outPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) //nolint:gosec // G304: the operator's --out
		if err != nil {
			return fmt.Errorf("admin export: %w", err)
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	red := redactor{reasoning: *redactReasoning, tools: *redactTools}
	n := 0
	emit := func(t store.ChainTurn) error {
		r := t.Response
		n++
		return enc.Encode(exportLine{ID: r.ID, Status: r.Status, Model: r.Model, CreatedAt: r.CreatedAt, CompletedAt: r.CompletedAt,
			PreviousResponseID: r.PreviousResponseID, ConversationID: r.ConversationID, Usage: r.Usage, Error: r.Error,
			Input: red.items(t.Input), Output: red.items(t.Output)})
	}
	if *chainID != "" {
		err = exportChain(ctx, st, ten, *chainID, emit)
	} else {
		err = exportAll(ctx, st, ten, emit)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.errOut, "exported %d responses\n", n)
	return nil
}

// exportChain emits the turns of response id's previous_response_id chain, oldest first.
func exportChain(ctx context.Context, st store.Store, tenant, id string, emit func(store.ChainTurn) error) error {
	chain, err := st.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenant, ID: id})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("admin export: the tenant has no response %q", id)
	}
	if err != nil {
		return err
	}
	for _, t := range chain.Turns {
		if err := emit(t); err != nil {
			return err
		}
	}
	return nil
}

// exportAll emits every response of tenant, in id order, a page at a time.
func exportAll(ctx context.Context, st store.Store, tenant string, emit func(store.ChainTurn) error) error {
	adm, ok := st.(store.Admin)
	if !ok {
		return fmt.Errorf("admin: %T cannot export", st)
	}
	after := ""
	for {
		ids, err := adm.ResponseIDList(ctx, &store.ResponseIDListParams{Tenant: tenant, After: after, Limit: 200})
		if err != nil || len(ids) == 0 {
			return err
		}
		for _, id := range ids {
			t, err := responseTurn(ctx, st, tenant, id)
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return err
			}
			if err := emit(t); err != nil {
				return err
			}
		}
		after = ids[len(ids)-1]
	}
}

// responseTurn reads one response with its input and output items.
func responseTurn(ctx context.Context, st store.Store, tenant, id string) (store.ChainTurn, error) {
	r, out, err := st.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenant, ID: id})
	if err != nil {
		return store.ChainTurn{}, err
	}
	t := store.ChainTurn{Response: *r, Output: out}
	after := ""
	for {
		page, err := st.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: tenant, ResponseID: id, Role: store.RoleInput,
			After: after, Limit: 1000, Order: store.OrderAsc})
		if err != nil {
			return store.ChainTurn{}, err
		}
		t.Input = append(t.Input, page.Items...)
		if !page.HasMore || len(page.Items) == 0 {
			return t, nil
		}
		after = page.Items[len(page.Items)-1].ID
	}
}

// redactor blanks what export was told to leave out, keeping every item's id and type.
type redactor struct{ reasoning, tools bool }

func (r redactor) items(in []wire.Item) []wire.Item {
	if in == nil {
		return []wire.Item{}
	}
	out := make([]wire.Item, 0, len(in))
	for _, it := range in {
		var set map[string]any
		switch {
		case r.reasoning && it.Type == "reasoning":
			set = map[string]any{"content": []any{}, "summary": []any{}, "encrypted_content": nil}
		case r.tools && it.Type == "function_call_output":
			set = map[string]any{"output": "[redacted]"}
		default:
			out = append(out, it)
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(it.JSON, &obj); err != nil {
			continue // not an object: never exported unredacted
		}
		for k, v := range set {
			if v == nil {
				delete(obj, k)
				continue
			}
			b, _ := json.Marshal(v)
			obj[k] = b
		}
		b, _ := json.Marshal(obj)
		red, err := wire.ParseItem(b)
		if err != nil {
			continue
		}
		out = append(out, red)
	}
	return out
}

func (a *admin) purge(ctx context.Context, args []string) error {
	fs := a.flags("purge", "purge --older-than DURATION [--dry-run]")
	olderThan := fs.Duration("older-than", 0, "delete finished responses created longer ago than this (e.g. 720h), as --retention does")
	dryRun := fs.Bool("dry-run", false, "only count what would be deleted")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if *olderThan <= 0 {
		return errors.New("admin purge: --older-than must be a positive duration such as 720h (30 days)")
	}
	st, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	before := time.Now().Add(-*olderThan)
	if *dryRun {
		adm, ok := st.(store.Admin)
		if !ok {
			return fmt.Errorf("admin: %T cannot count", st)
		}
		n, err := adm.ResponsePurgeCount(ctx, &store.ResponsePurgeCountParams{Before: before})
		if err != nil {
			return err
		}
		fmt.Fprintf(a.out, "would delete %d finished responses created before %s (dry run)\n", n, before.UTC().Format(time.RFC3339))
		return nil
	}
	total := 0
	for {
		n, err := st.ResponsePurge(ctx, &store.ResponsePurgeParams{Before: before, Limit: 1000})
		total += n
		if err != nil {
			return fmt.Errorf("admin purge: %w (after deleting %d)", err, total)
		}
		if n == 0 {
			break
		}
	}
	fmt.Fprintf(a.out, "deleted %d finished responses created before %s\n", total, before.UTC().Format(time.RFC3339))
	return nil
}

// keys manages the sealing keys of a --seal-keys-file: the rotation of docs/reasoning.md, one
// step per command. It never prints a key, only key ids.
func (a *admin) keys(args []string) error {
	fs := a.flags("keys", "keys list | add KID | seal KID | retire KID  [--seal-keys-file FILE]")
	file := fs.String("seal-keys-file", envOr(a.lookupEnv, "RESPGATE_SEAL_KEYS_FILE", ""), "the keys file respgate reads (RESPGATE_SEAL_KEYS_FILE)")
	if len(args) == 0 {
		fs.Usage()
		return errors.New("admin keys: name list, add KID, seal KID or retire KID")
	}
	verb := args[0]
	want := map[string]int{"list": 0, "add": 1, "seal": 1, "retire": 1}
	n, ok := want[verb]
	if !ok {
		fs.Usage()
		return fmt.Errorf("admin keys: unknown %q (want list, add, seal or retire)", verb)
	}
	pos, err := parse(fs, args[1:], n)
	if err != nil {
		return err
	}
	if *file == "" {
		return errors.New("admin keys: name the keys file with --seal-keys-file (RESPGATE_SEAL_KEYS_FILE); keys given in RESPGATE_SEAL_KEYS are edited where they are set")
	}
	b, err := os.ReadFile(*file)
	if err != nil && !(errors.Is(err, os.ErrNotExist) && verb == "add") {
		return fmt.Errorf("admin keys: %w", err)
	}
	comments, entries := splitKeyFile(string(b))
	if _, _, err := seal.ParseKeys(strings.Join(entries, ",")); err != nil {
		return fmt.Errorf("admin keys: %s: %w", *file, err)
	}
	if verb == "list" {
		a.listKeys(entries)
		return nil
	}
	if entries, err = editKeys(verb, pos[0], *file, entries); err != nil {
		return err
	}
	body := strings.Join(append(comments, entries...), "\n") + "\n"
	tmp := *file + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return fmt.Errorf("admin keys: %w", err)
	}
	if err := os.Rename(tmp, *file); err != nil {
		return fmt.Errorf("admin keys: %w", err)
	}
	fmt.Fprintf(a.out, "%s: %s %s; deploy the file to every replica (docs/reasoning.md, rotation)\n", filepath.Base(*file), verb, pos[0])
	return nil
}

// keyIndex is the index of key kid among the key file's entries, -1 when it has none.
func keyIndex(entries []string, kid string) int {
	return slices.IndexFunc(entries, func(e string) bool { k, _, _ := strings.Cut(e, ":"); return k == kid })
}

// listKeys prints each key id of the file with its role, and the generated one.
func (a *admin) listKeys(entries []string) {
	for i, e := range entries {
		kid, val, _ := strings.Cut(e, ":")
		role := "opens"
		switch {
		case val == "retired":
			role = "retired"
		case i == 0:
			role = "seals and opens"
		}
		fmt.Fprintf(a.out, "%s\t%s\n", kid, role)
	}
	if keyIndex(entries, "auto") < 0 {
		fmt.Fprintf(a.out, "auto\topens (generated in the store; list auto:retired to retire it)\n")
	}
}

// editKeys is the key file's entries after verb (add, seal or retire) on key kid.
func editKeys(verb, kid, file string, entries []string) ([]string, error) {
	switch verb {
	case "add":
		if keyIndex(entries, kid) >= 0 {
			return nil, fmt.Errorf("admin keys add: %s already has a key %q", file, kid)
		}
		secret, err := seal.NewKeySecret()
		if err != nil {
			return nil, err
		}
		entries = append(entries, kid+":"+base64.StdEncoding.EncodeToString(secret))
		if _, _, err := seal.ParseKeys(strings.Join(entries, ",")); err != nil {
			return nil, fmt.Errorf("admin keys add: %w", err)
		}
	case "seal":
		i := keyIndex(entries, kid)
		if i < 0 || strings.HasSuffix(entries[i], ":retired") {
			return nil, fmt.Errorf("admin keys seal: %s has no usable key %q", file, kid)
		}
		sealing := entries[i] // read before Delete moves the others over it
		entries = append([]string{sealing}, slices.Delete(entries, i, i+1)...)
	case "retire":
		i := keyIndex(entries, kid)
		switch {
		case i < 0:
			entries = append(entries, kid+":retired") // e.g. auto, or a key already removed
		case i == 0 && !strings.HasSuffix(entries[0], ":retired"):
			return nil, fmt.Errorf("admin keys retire: %q seals new blobs; seal another key first (respgate admin keys seal KID)", kid)
		default:
			entries[i] = kid + ":retired"
		}
		if keys, _, err := seal.ParseKeys(strings.Join(entries, ",")); err != nil || len(keys) == 0 {
			return nil, fmt.Errorf("admin keys retire: %s would have no key that seals", file)
		}
	}
	return entries, nil
}

// splitKeyFile splits a keys file into its comment lines and its entries, one per key.
func splitKeyFile(s string) (comments, entries []string) {
	for line := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			comments = append(comments, line)
			continue
		}
		for e := range strings.SplitSeq(line, ",") {
			if e = strings.TrimSpace(e); e != "" {
				entries = append(entries, e)
			}
		}
	}
	return comments, entries
}
