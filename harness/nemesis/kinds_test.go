package nemesis

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestKindsListed finds every Violation literal of the package (tests
// included) and checks that its Kind is one of violationKinds, the list
// TestTeeth holds a broken variant for, and that every listed kind is
// reported somewhere: a new kind without a variant fails here or there.
func TestKindsListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || !isViolationType(lit.Type) {
				return true
			}
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if id, isID := kv.Key.(*ast.Ident); !ok || !isID || id.Name != "Kind" {
					continue
				}
				s, ok := kv.Value.(*ast.BasicLit)
				if !ok || s.Kind != token.STRING {
					t.Errorf("%v: a Violation whose Kind is not a string literal: the list cannot be checked", fset.Position(kv.Pos()))
					continue
				}
				kind, _ := strconv.Unquote(s.Value)
				found[kind] = true
				if !slices.Contains(violationKinds, kind) {
					t.Errorf("%v: violation kind %q is not in violationKinds (kinds.go): list it, and give it a broken variant in TestTeeth", fset.Position(kv.Pos()), kind)
				}
			}
			return true
		})
	}
	for _, k := range violationKinds {
		if !found[k] {
			t.Errorf("violationKinds lists %q, which nothing reports", k)
		}
	}
}

func isViolationType(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "Violation"
}
