package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// errorSources are the packages whose code builds the errors respgate returns (the simulator's
// are vLLM's, not respgate's).
var errorSources = []string{"../server", "../engine", "../wire", "../rehydrate", "../upstream", "../accumulator", "../store", "../cmd/respgate"}

// relayedCodes are the functions that set an error's code or type from a variable: each passes on
// a value that is checked where it is chosen (a caller's constant) or that comes from upstream,
// which docs/errors.md describes as such. A new function that does so must be added here with
// its reason, so no code escapes the check below.
var relayedCodes = map[string]string{
	"wire.Invalid":              "its callers' code argument is checked at each call",
	"wire.Conflict":             "its callers' code argument is checked at each call",
	"wire.Body":                 "copies an APIError's code into the envelope",
	"upstream.httpAPIError":     "relays vLLM's word code and OpenAI client type (the mapping's 'other 4xx' row)",
	"engine.failureObject":      "the code of an envelope checked where that envelope is built",
	"engine.errorJSON":          "renders a stored error object whose code is checked where it is built",
	"server.respond":            "answers a failed chat turn with its error object, whose code is checked where it is built",
	"accumulator.upstreamError": "relays the upstream's own code of a failed response (the 'failed' rows)",
}

// TestErrorsDocListsEveryCode keeps docs/errors.md honest: every error code (and envelope type)
// that non-test code can put in an envelope or an error object, as a literal or a constant,
// appears in the doc in backticks, so adding an error without documenting it fails `make test`.
// It reads the code with go/ast: composite literals of APIError and ErrorObject (their Code and
// Type), assignments to a .Code field, the code argument of wire.Invalid and wire.Conflict, and every Code*
// constant.
func TestErrorsDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	consts := map[string]string{} // "pkg.Name" and, within pkg, "Name" via the pkg prefix
	for _, dir := range errorSources {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no Go files in %s (%v)", dir, err)
		}
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			collectConsts(f, consts)
		}
	}
	found := map[string]string{} // value -> where
	var unresolved []string
	relayed := map[string]bool{}
	for _, f := range files {
		pkg := f.Name.Name
		for name, v := range consts {
			if p, n, _ := strings.Cut(name, "."); p == pkg && strings.HasPrefix(n, "Code") {
				found[v] = name
			}
		}
		for _, decl := range f.Decls {
			owner := pkg + "." + declName(decl)
			ast.Inspect(decl, func(n ast.Node) bool {
				for _, e := range codeExprs(n) {
					v, ok := resolve(pkg, e, consts)
					switch {
					case ok:
						found[v] = fset.Position(e.Pos()).String()
					case relayedCodes[owner] == "":
						unresolved = append(unresolved, fset.Position(e.Pos()).String()+" in "+owner)
					default:
						relayed[owner] = true
					}
				}
				return true
			})
		}
	}
	for _, u := range unresolved {
		t.Errorf("%s sets an error code or type from a variable: make it a constant, or add the function to relayedCodes with its reason", u)
	}
	for owner := range relayedCodes {
		if !relayed[owner] {
			t.Errorf("relayedCodes lists %s, which sets no code from a variable any more", owner)
		}
	}
	values := make([]string, 0, len(found))
	for v := range found {
		values = append(values, v)
	}
	sort.Strings(values)
	for _, v := range values {
		if v != "" && !strings.Contains(string(doc), "`"+v+"`") {
			t.Errorf("error code or type %q (%s) is not in docs/errors.md", v, found[v])
		}
	}
	if len(values) < 40 {
		t.Errorf("found only %d codes and types: the scan is broken", len(values))
	}
}

func collectConsts(f *ast.File, consts map[string]string) {
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						consts[f.Name.Name+"."+name.Name] = s
					}
				}
			}
		}
	}
}

func declName(d ast.Decl) string {
	if fd, ok := d.(*ast.FuncDecl); ok {
		return fd.Name.Name
	}
	return "var"
}

// codeExprs returns the expressions n sets an error's code or type to.
func codeExprs(n ast.Node) []ast.Expr {
	var out []ast.Expr
	switch n := n.(type) {
	case *ast.CompositeLit:
		if name := typeName(n.Type); name == "APIError" || name == "ErrorObject" {
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && (k.Name == "Code" || k.Name == "Type") {
						out = append(out, kv.Value)
					}
				}
			}
		}
	case *ast.AssignStmt:
		for i, lhs := range n.Lhs {
			if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "Code" && len(n.Rhs) == len(n.Lhs) {
				out = append(out, n.Rhs[i])
			}
		}
	case *ast.CallExpr:
		if name := typeName(n.Fun); (name == "Invalid" || name == "Conflict") && len(n.Args) >= 2 {
			out = append(out, n.Args[1])
		}
	}
	return out
}

func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// resolve returns the string value of a literal or a constant of the scanned packages.
func resolve(pkg string, e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.Ident:
		v, ok := consts[pkg+"."+e.Name]
		return v, ok
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			v, ok := consts[x.Name+"."+e.Sel.Name]
			return v, ok
		}
	}
	return "", false
}
