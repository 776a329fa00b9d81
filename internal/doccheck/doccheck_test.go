package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// maxREADMELines is the most lines the README may have: it is read in a
// newcomer's first hour; the rest belongs in docs/.
const maxREADMELines = 220

// markdownFiles returns the Markdown files whose links are checked.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	for _, pattern := range []string{"docs/*.md", "docker/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, rel)
		}
	}
	return files
}

// linkRE matches an inline Markdown link's target: [text](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// codeRE matches fenced code blocks and inline code, whose text is not
// Markdown.
var codeRE = regexp.MustCompile("(?s)```.*?```|`[^`\n]*`")

// TestRelativeLinks checks that every relative link of the Markdown files
// names a file or directory of the repository, and that a link's #anchor
// names a heading of the Markdown file it points to.
func TestRelativeLinks(t *testing.T) {
	for _, file := range markdownFiles(t) {
		text := readFile(t, file)
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(text, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %q: %v", file, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !hasAnchor(readFile(t, dest), anchor) {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", file, target, dest, anchor)
			}
		}
	}
}

// hasAnchor reports whether a heading of the Markdown text has the anchor
// GitHub gives it: lower case, spaces as hyphens, punctuation dropped.
func hasAnchor(text, anchor string) bool {
	for _, line := range strings.Split(codeRE.ReplaceAllString(text, ""), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
				b.WriteRune(r)
			}
		}
		if b.String() == anchor {
			return true
		}
	}
	return false
}

// TestREADMELength keeps the README at most maxREADMELines long.
func TestREADMELength(t *testing.T) {
	if n := strings.Count(readFile(t, "README.md"), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, more than %d: move details to docs/", n, maxREADMELines)
	}
}

// TestREADMEQuickStart checks that the README shows the code of the
// examples that driver/redisnx's TestExamples runs: Example as the body of
// a program's main, Example_open as a fragment.
func TestREADMEQuickStart(t *testing.T) {
	readme := readFile(t, "README.md")
	const file = "driver/redisnx/example_test.go"
	src := readFile(t, file)
	bodies := exampleBodies(t, file, src)
	imports := regexp.MustCompile(`(?s)\nimport \(\n.*?\n\)\n`).FindString(src)
	for _, c := range []struct{ name, want string }{
		// The program's imports are the example file's, which uses each.
		{"Example", "package main\n" + imports + "\nfunc main() {\n" + bodies["Example"] + "}\n"},
		{"Example_open", dedent(bodies["Example_open"])},
	} {
		if bodies[c.name] == "" {
			t.Errorf("%s has no function %s", file, c.name)
			continue
		}
		if !strings.Contains(readme, c.want) {
			t.Errorf("README.md does not show %s of %s; it should contain:\n%s", c.name, file, c.want)
		}
	}
}

// exampleBodies returns the source text of each function of file (whose
// text is src) between its braces, from the line after "{" to the line of
// "}".
func exampleBodies(t *testing.T, file, src string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		from := fset.Position(fn.Body.Lbrace).Offset + len("{\n")
		to := fset.Position(fn.Body.Rbrace).Offset
		bodies[fn.Name.Name] = src[from:to]
	}
	return bodies
}

// dedent removes one leading tab from every line of s.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	return strings.Join(lines, "\n")
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
