// Package migrations owns respgate's database schema: one directory of golang-migrate files per
// backend (postgres/, sqlite/), embedded into the binary, always on identical version numbers
// (docs/design.md §2, docs/style.md "Store contract and conformance"). A version a backend does not need still gets
// a file there, as a no-op placeholder, so the two sets never drift. It must not hold Go logic
// beyond listing and applying these files.
package migrations

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Postgres holds the Postgres migrations under the directory "postgres".
//
//go:embed postgres/*.sql
var Postgres embed.FS

// SQLite holds the SQLite migrations under the directory "sqlite".
//
//go:embed sqlite/*.sql
var SQLite embed.FS

// Directories inside Postgres and SQLite.
const (
	PostgresDir = "postgres"
	SQLiteDir   = "sqlite"
)

var fileName = regexp.MustCompile(`^([0-9]+)_[a-z0-9_]+\.(up|down)\.sql$`)

// Versions lists the migration versions under dir in fsys, ascending and without duplicates. Every
// file there must be named NNN_name.up.sql or NNN_name.down.sql, and each version needs both, so a
// misnamed or half-written migration is an error here instead of being silently skipped.
func Versions(fsys fs.FS, dir string) ([]uint, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations %s: %w", dir, err)
	}
	halves := map[uint]int{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("read migrations %s: file %q is not NNN_name.(up|down).sql", dir, e.Name())
		}
		v, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("read migrations %s: version of %q: %w", dir, e.Name(), err)
		}
		halves[uint(v)]++
	}
	versions := make([]uint, 0, len(halves))
	for v, n := range halves {
		if n != 2 {
			return nil, fmt.Errorf("read migrations %s: version %d needs exactly one up and one down file", dir, v)
		}
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions, nil
}

// Up applies every pending migration under dir in fsys through drv, a golang-migrate database
// driver the caller opened on a dedicated connection: Up closes it (and so the *sql.DB under it)
// before returning. Drivers that take a lock (Postgres: an advisory lock) make concurrent Ups from
// several replicas safe.
func Up(fsys fs.FS, dir string, drv database.Driver) (err error) {
	return upTo(fsys, dir, drv, 0)
}

// UpTo is Up that stops at version (tests use it to fill a database laid out as an earlier
// version, then let the store migrate it the rest of the way).
func UpTo(fsys fs.FS, dir string, drv database.Driver, version uint) error {
	return upTo(fsys, dir, drv, version)
}

// upTo migrates up to version, or all the way when version is 0.
func upTo(fsys fs.FS, dir string, drv database.Driver, version uint) error {
	return run(fsys, dir, drv, func(m *migrate.Migrate) error {
		up := m.Up
		if version > 0 {
			up = func() error { return m.Migrate(version) }
		}
		if err := up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("apply migrations %s: %w", dir, err)
		}
		return nil
	})
}

// Status reports the version applied through drv (0: none) and whether a failed migration left
// it dirty. Like Up, it closes drv.
func Status(fsys fs.FS, dir string, drv database.Driver) (version uint, dirty bool, err error) {
	err = run(fsys, dir, drv, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			version, dirty, err = 0, false, nil
		}
		if err != nil {
			return fmt.Errorf("read migration version %s: %w", dir, err)
		}
		return nil
	})
	return version, dirty, err
}

// Down reverts the last n applied migrations (n > 0) through drv, newest first, and closes drv.
// Reverting drops what those versions added, data included.
func Down(fsys fs.FS, dir string, drv database.Driver, n int) error {
	if n <= 0 {
		_ = drv.Close()
		return fmt.Errorf("revert migrations %s: the number of steps must be positive, got %d", dir, n)
	}
	return run(fsys, dir, drv, func(m *migrate.Migrate) error {
		if err := m.Steps(-n); err != nil {
			return fmt.Errorf("revert migrations %s: %w", dir, err)
		}
		return nil
	})
}

// run opens golang-migrate on dir in fsys and drv, calls fn and closes both.
func run(fsys fs.FS, dir string, drv database.Driver, fn func(m *migrate.Migrate) error) (err error) {
	src, err := iofs.New(fsys, dir)
	if err != nil {
		_ = drv.Close()
		return fmt.Errorf("open migrations %s: %w", dir, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, dir, drv)
	if err != nil {
		_ = src.Close()
		_ = drv.Close()
		return fmt.Errorf("start migrations %s: %w", dir, err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil && (srcErr != nil || dbErr != nil) {
			err = fmt.Errorf("close migrations %s: %w", dir, errors.Join(srcErr, dbErr))
		}
	}()
	return fn(m)
}
