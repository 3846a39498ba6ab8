package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shape limits of docs/style.md's review (issue 37): no non-test Go file over 800 lines, no
// function over 80 lines, and the front doors' *server.Server at most 40 methods (the turn
// lifecycle lives in engine). A change that breaks one says which and where.
const (
	maxFileLines   = 800
	maxFuncLines   = 80
	maxServerFuncs = 40
)

func TestCodeKeepsItsShape(t *testing.T) {
	fset := token.NewFileSet()
	serverMethods := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != repoRoot {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(repoRoot, path)
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it along its seams", rel, n, maxFileLines)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s has %d lines, over %d", rel, fn.Name.Name, n, maxFuncLines)
			}
			if filepath.Dir(rel) == "server" && fn.Recv != nil && len(fn.Recv.List) == 1 {
				if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
					if id, ok := star.X.(*ast.Ident); ok && id.Name == "Server" {
						serverMethods++
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if serverMethods == 0 || serverMethods > maxServerFuncs {
		t.Errorf("*server.Server has %d methods, want 1 to %d: the turn lifecycle belongs in engine, a door's routes in its own type", serverMethods, maxServerFuncs)
	}
}
