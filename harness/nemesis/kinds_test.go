package nemesis

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestKindsListed finds every Violation literal of the package (and of
// nemesis_test.go, whose runOne reports leaks; not of the other tests,
// whose literals are examples) and checks that its Kind is one of violationKinds and its
// detector (Kind, or Kind/Check for the kinds of kindChecks) one of
// detectors, the list TestTeeth holds a broken variant for, and that
// every listed detector is reported somewhere: a new kind or detector
// without a variant fails here or there.
func TestKindsListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") && name != "nemesis_test.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || !isViolationType(lit.Type) {
				return true
			}
			kind, kOK := literalField(t, fset, lit, "Kind")
			check, _ := literalField(t, fset, lit, "Check")
			if !kOK {
				return true
			}
			v := Violation{Kind: kind, Check: check}
			found[v.Detector()] = true
			switch {
			case !slices.Contains(violationKinds, kind):
				t.Errorf("%v: violation kind %q is not in violationKinds (kinds.go): list it, and give it a broken variant in TestTeeth", fset.Position(lit.Pos()), kind)
			case !slices.Contains(detectors(), v.Detector()):
				t.Errorf("%v: detector %q is not among detectors (kinds.go: a kind of kindChecks needs a listed Check, another none)", fset.Position(lit.Pos()), v.Detector())
			}
			return true
		})
	}
	for _, d := range detectors() {
		if !found[d] {
			t.Errorf("detectors lists %q, which nothing reports", d)
		}
	}
}

// literalField is the string literal of a Violation literal's field name,
// and whether it has one.
func literalField(t *testing.T, fset *token.FileSet, lit *ast.CompositeLit, name string) (string, bool) {
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if id, isID := kv.Key.(*ast.Ident); !ok || !isID || id.Name != name {
			continue
		}
		s, ok := kv.Value.(*ast.BasicLit)
		if !ok || s.Kind != token.STRING {
			t.Errorf("%v: a Violation whose %s is not a string literal: the list cannot be checked", fset.Position(kv.Pos()), name)
			return "", false
		}
		v, _ := strconv.Unquote(s.Value)
		return v, true
	}
	return "", false
}

func isViolationType(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "Violation"
}
