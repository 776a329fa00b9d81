// Command apilist writes dlock's public API, one line per exported
// identifier with its signature, so that a change to it is seen in review.
//
//	go run ./internal/apilist > api/dlock.txt     (make api)
//	go run ./internal/apilist -check api/dlock.txt (make check)
//
// It lists the packages under lock/ and driver/, driver/etcd's module
// included, but main packages. It reads the source with go/parser and
// go/doc, so it needs no module's dependencies: the standard library only.
// A line is "PACKAGE: DECLARATION"; methods of interfaces and fields of
// structs get lines of their own, so a change shows as one line.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// module is the main module's path; the packages' paths start with it.
const module = "github.com/dlock-go/dlock"

// roots are the directories whose packages are public API.
var roots = []string{"lock", "driver"}

func main() {
	check := flag.String("check", "", "compare with this `file` instead of printing; fail on a difference")
	flag.Parse()
	lines, err := list(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(1)
	}
	if *check == "" {
		for _, l := range lines {
			fmt.Println(l)
		}
		return
	}
	if err := compare(*check, lines); err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(1)
	}
}

// compare fails, listing the lines that differ, when file does not hold
// lines.
func compare(file string, lines []string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	recorded := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	gone, added := difference(recorded, lines), difference(lines, recorded)
	if len(gone) == 0 && len(added) == 0 {
		return nil
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "the public API differs from %s:\n", file)
	for _, l := range gone {
		fmt.Fprintf(&msg, "- %s\n", l)
	}
	for _, l := range added {
		fmt.Fprintf(&msg, "+ %s\n", l)
	}
	fmt.Fprintf(&msg, "if the change is meant, run make api and commit %s (and a CHANGELOG entry)", file)
	return fmt.Errorf("%s", msg.String())
}

// difference returns the lines of a that b lacks, in a's order.
func difference(a, b []string) []string {
	in := map[string]bool{}
	for _, l := range b {
		in[l] = true
	}
	var out []string
	for _, l := range a {
		if !in[l] {
			out = append(out, l)
		}
	}
	return out
}

// list returns the API lines of every public package under dir's roots.
func list(dir string) ([]string, error) {
	var lines []string
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join(dir, root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" || d.Name() == "internal" {
				return filepath.SkipDir
			}
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			pkg, err := packageLines(path, module+"/"+filepath.ToSlash(rel))
			lines = append(lines, pkg...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return lines, nil
}

// packageLines returns the API lines of the package in dir, none for a
// directory without Go files or with a main package.
func packageLines(dir, importPath string) ([]string, error) {
	bp, err := build.ImportDir(dir, 0)
	if _, ok := err.(*build.NoGoError); ok {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if bp.Name == "main" {
		return nil, nil
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, importPath)
	if err != nil {
		return nil, err
	}
	w := &writer{fset: fset, pkg: strings.TrimPrefix(importPath, module+"/")}
	w.values("const", p.Consts)
	w.values("var", p.Vars)
	w.funcs(p.Funcs)
	for _, t := range p.Types {
		w.typ(t)
	}
	sort.Strings(w.lines)
	return w.lines, nil
}

// writer collects one package's lines.
type writer struct {
	fset  *token.FileSet
	pkg   string
	lines []string
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, w.pkg+": "+fmt.Sprintf(format, args...))
}

// node prints n on one line.
func (w *writer) node(n any) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, w.fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return oneLine(b.String())
}

// oneLine joins the lines of s, dropping comments and runs of spaces.
func oneLine(s string) string {
	var parts []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		l := sc.Text()
		if i := strings.Index(l, "//"); i >= 0 && !strings.Contains(l[:i], "\"") {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
}

// values adds a line per exported name of consts or vars, with its type
// and value as written (iota's values are implicit).
func (w *writer) values(kind string, vs []*doc.Value) {
	for _, v := range vs {
		for _, spec := range v.Decl.Specs {
			s := spec.(*ast.ValueSpec)
			for i, name := range s.Names {
				if !name.IsExported() {
					continue
				}
				line := kind + " " + name.Name
				if s.Type != nil {
					line += " " + w.node(s.Type)
				}
				if i < len(s.Values) {
					line += " = " + w.node(s.Values[i])
				}
				w.add("%s", line)
			}
		}
	}
}

// funcs adds a line per function or method.
func (w *writer) funcs(fs []*doc.Func) {
	for _, f := range fs {
		sig := strings.TrimPrefix(w.node(f.Decl.Type), "func")
		if f.Decl.Recv != nil {
			w.add("method (%s) %s%s", w.node(f.Decl.Recv.List[0].Type), f.Name, sig)
		} else {
			w.add("func %s%s", f.Name, sig)
		}
	}
}

// typ adds the lines of an exported type: the type, its exported fields
// or interface methods, its constructors, methods, consts and vars.
func (w *writer) typ(t *doc.Type) {
	for _, spec := range t.Decl.Specs {
		s := spec.(*ast.TypeSpec)
		if !s.Name.IsExported() {
			continue
		}
		tparams := ""
		if s.TypeParams != nil {
			tparams = w.node(s.TypeParams)
		}
		assign := ""
		if s.Assign.IsValid() {
			assign = "= "
		}
		switch u := s.Type.(type) {
		case *ast.StructType:
			w.add("type %s%s %sstruct", s.Name.Name, tparams, assign)
			w.fields(s.Name.Name, "field", u.Fields)
		case *ast.InterfaceType:
			w.add("type %s%s %sinterface", s.Name.Name, tparams, assign)
			w.fields(s.Name.Name, "method", u.Methods)
		default:
			w.add("type %s%s %s%s", s.Name.Name, tparams, assign, w.node(s.Type))
		}
	}
	w.values("const", t.Consts)
	w.values("var", t.Vars)
	w.funcs(t.Funcs)
	w.funcs(t.Methods)
}

// fields adds a line per exported (or embedded) field of a struct, or
// method of an interface, of type name.
func (w *writer) fields(name, kind string, list *ast.FieldList) {
	if list == nil {
		return
	}
	for _, f := range list.List {
		typ := w.node(f.Type)
		if len(f.Names) == 0 {
			w.add("%s %s embeds %s", kind, name, typ)
			continue
		}
		for _, n := range f.Names {
			if !n.IsExported() {
				continue
			}
			if kind == "method" {
				typ = strings.TrimPrefix(typ, "func")
				w.add("method %s.%s%s", name, n.Name, typ)
			} else {
				w.add("field %s.%s %s", name, n.Name, typ)
			}
		}
	}
}
