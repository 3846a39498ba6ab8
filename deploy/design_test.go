package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDesignTableListsEveryPackage: every non-test Go package of the module is named (in
// backquotes) in a row of the package table of docs/design.md §2, and every package a row starts
// with exists, so the table says who owns what for all of the code and nothing else.
func TestDesignTableListsEveryPackage(t *testing.T) {
	rows := designPackageRows(t)
	named := map[string]bool{}
	for _, r := range rows {
		for _, p := range r.named {
			named[p] = true
		}
	}
	pkgs := modulePackages(t)
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages (%v): the walk is broken", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		if !named[p] {
			t.Errorf("package %s is missing from the table of docs/design.md §2", p)
		}
	}
	for _, r := range rows {
		for _, p := range r.owners {
			if !slices.Contains(pkgs, p) {
				t.Errorf("docs/design.md §2 has a row for %s, which is no package of the module", p)
			}
		}
	}
}

// designRow is one row of the §2 table: the packages its first cell names, and every package
// path the row names in backquotes (the first cell's and those its text names, such as
// store/postgres in the store row).
type designRow struct {
	owners, named []string
}

var backquoted = regexp.MustCompile("`([a-z][a-z0-9/_-]*)`")

func designPackageRows(t *testing.T) []designRow {
	t.Helper()
	doc := readRepoFile(t, "docs/design.md")
	_, sec, ok := strings.Cut(doc, "\n## 2. ")
	if !ok {
		t.Fatal("docs/design.md has no section 2")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var rows []designRow
	for line := range strings.SplitSeq(sec, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		var r designRow
		for _, m := range backquoted.FindAllStringSubmatch(cells[1], -1) {
			r.owners = append(r.owners, m[1])
		}
		for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
			r.named = append(r.named, m[1])
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("docs/design.md §2 has no package table")
	}
	return rows
}

// modulePackages lists the module's packages that have a non-test Go file, as paths relative to
// the module root ("store/postgres"), the way the table names them.
func modulePackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != repoRoot && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if path != repoRoot {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
				rel, err := filepath.Rel(repoRoot, path)
				if err != nil {
					return err
				}
				pkgs = append(pkgs, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}
