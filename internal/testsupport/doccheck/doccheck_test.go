package doccheck

import (
	"fmt"
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
const root = "../../.."

// maxREADMELines is the most lines the README may have: it is read in a
// newcomer's first hour; the rest belongs in docs/.
const maxREADMELines = 220

// markdownFiles returns the Markdown files whose links are checked.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	for _, pattern := range []string{"docs/*.md", "docs/wire/*.md", "docs/decisions/*.md", "docker/*.md"} {
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

// inlineRE matches an inline Markdown link's target, with or without a
// title: [text](target), [text](target "title"), [text](<target>).
var inlineRE = regexp.MustCompile(`\]\(\s*(<[^>\n]*>|[^)\s]+)(?:\s+(?:"[^"\n]*"|'[^'\n]*'|\([^)\n]*\)))?\s*\)`)

// refDefRE matches a link reference definition: [ref]: target "title".
var refDefRE = regexp.MustCompile(`(?m)^ {0,3}\[([^\]\n]+)\]:[ \t]*(<[^>\n]*>|\S+)`)

// refUseRE matches a reference-style link: [text][ref], or [text][] for
// the reference named by its text.
var refUseRE = regexp.MustCompile(`\[([^\]\n]+)\]\[([^\]\n]*)\]`)

// codeRE matches fenced code blocks and inline code, whose text is not
// Markdown.
var codeRE = regexp.MustCompile("(?s)```.*?```|`[^`\n]*`")

// TestRelativeLinks checks that every relative link of the Markdown files
// names a file or directory of the repository, and that a link's #anchor
// names a heading of the Markdown file it points to.
func TestRelativeLinks(t *testing.T) {
	for _, file := range markdownFiles(t) {
		for _, p := range brokenLinks(file, readFile(t, file)) {
			t.Error(p)
		}
	}
}

// TestAudit38LinkForms: a broken link is found in each of the forms
// Markdown writes links in: inline, inline with a title, and
// reference-style (whose definition may carry a title too); a reference
// with no definition is broken as well. Good links of the same forms pass.
func TestAudit38LinkForms(t *testing.T) {
	good := "[a](docs/design.md) [b](docs/design.md \"Design\") [c](<docs/testing.md>)\n" +
		"[d][design] [testing][] [e](docs/safety.md#trust-model 'Trust')\n\n" +
		"[design]: docs/design.md \"The design\"\n[Testing]: <docs/testing.md>\n"
	if p := brokenLinks("README.md", good); len(p) != 0 {
		t.Errorf("good links reported broken: %q", p)
	}
	for _, c := range []struct{ form, text, want string }{
		{"inline", "[x](docs/nowhere.md)", `"docs/nowhere.md"`},
		{"inline with a title", `[x](docs/nowhere.md "title")`, `"docs/nowhere.md"`},
		{"inline with a title, bad anchor", `[x](docs/design.md#nowhere "title")`, "#nowhere"},
		{"reference-style", "[x][ref]\n\n[ref]: docs/nowhere.md\n", `"docs/nowhere.md"`},
		{"reference-style with a title", "[x][ref]\n\n[ref]: docs/nowhere.md 'title'\n", `"docs/nowhere.md"`},
		{"collapsed reference", "[ref][]\n\n[ref]: docs/nowhere.md\n", `"docs/nowhere.md"`},
		{"undefined reference", "[x][nowhere]", "no definition"},
	} {
		p := brokenLinks("README.md", c.text)
		if len(p) != 1 || !strings.Contains(p[0], c.want) {
			t.Errorf("%s link %q: reported %q; want one problem mentioning %s", c.form, c.text, p, c.want)
		}
	}
}

// brokenLinks returns a line for each relative link of file (whose text
// is text) that names no file or directory of the repository, or whose
// #anchor names no heading of the Markdown file it points to, and for
// each reference-style link with no definition.
func brokenLinks(file, text string) []string {
	text = codeRE.ReplaceAllString(text, "")
	var targets, problems []string
	for _, m := range inlineRE.FindAllStringSubmatch(text, -1) {
		targets = append(targets, m[1])
	}
	defs := map[string]bool{}
	for _, m := range refDefRE.FindAllStringSubmatch(text, -1) {
		defs[refLabel(m[1])] = true
		targets = append(targets, m[2])
	}
	for _, m := range refUseRE.FindAllStringSubmatch(text, -1) {
		ref := m[2]
		if ref == "" {
			ref = m[1]
		}
		if !defs[refLabel(ref)] {
			problems = append(problems, fmt.Sprintf("%s: link [%s][%s]: no definition [%s]: of the reference", file, m[1], m[2], ref))
		}
	}
	for _, target := range targets {
		if p := checkTarget(file, strings.Trim(target, "<>")); p != "" {
			problems = append(problems, p)
		}
	}
	return problems
}

// refLabel is a reference's label as Markdown matches it: case and runs
// of white space do not count.
func refLabel(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// checkTarget returns what is wrong with a link of file to target, or ""
// for a good link or one that leaves the repository.
func checkTarget(file, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), path)
		if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
			return fmt.Sprintf("%s: link %q: %v", file, target, err)
		}
	}
	if anchor != "" && strings.HasSuffix(dest, ".md") {
		b, err := os.ReadFile(filepath.Join(root, dest))
		if err != nil {
			return fmt.Sprintf("%s: link %q: %v", file, target, err)
		}
		if !hasAnchor(string(b), anchor) {
			return fmt.Sprintf("%s: link %q: %s has no heading with anchor #%s", file, target, dest, anchor)
		}
	}
	return ""
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

// TestREADMEMultiKey checks that the README shows the lines of lock's
// ExampleLocker_LockMany from its LockMany call to its Unlock.
func TestREADMEMultiKey(t *testing.T) {
	const file = "lock/example_test.go"
	body := exampleBodies(t, file, readFile(t, file))["ExampleLocker_LockMany"]
	from, to := strings.Index(body, "\tset, err :="), strings.Index(body, "\tdefer set.Unlock")
	if from < 0 || to < from {
		t.Fatalf("%s: ExampleLocker_LockMany has no LockMany call followed by set.Unlock", file)
	}
	end := to + strings.Index(body[to:], "\n") + 1
	if want := dedent(body[from:end]); !strings.Contains(readFile(t, "README.md"), want) {
		t.Errorf("README.md does not show ExampleLocker_LockMany of %s; it should contain:\n%s", file, want)
	}
}

// TestREADMEElection checks that the README shows the lines of lock's
// ExampleElection from its Election call to its term's Unlock.
func TestREADMEElection(t *testing.T) {
	const file = "lock/election_example_test.go"
	body := exampleBodies(t, file, readFile(t, file))["ExampleElection"]
	from, to := strings.Index(body, "\telection, err :="), strings.Index(body, "\tdefer term.Unlock")
	if from < 0 || to < from {
		t.Fatalf("%s: ExampleElection has no Election call followed by term.Unlock", file)
	}
	end := to + strings.Index(body[to:], "\n") + 1
	if want := dedent(body[from:end]); !strings.Contains(readFile(t, "README.md"), want) {
		t.Errorf("README.md does not show ExampleElection of %s; it should contain:\n%s", file, want)
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

// TestLockDocListsEveryDriver: the lock package doc's lists of drivers
// name every driver package under driver/ (drivertest is the suite, not
// a driver), so that a new driver cannot be left out of them.
func TestLockDocListsEveryDriver(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join(root, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	var drivers []string
	for _, d := range dirs {
		if d.IsDir() && d.Name() != "drivertest" {
			drivers = append(drivers, d.Name())
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "lock", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", " ")), " ")
	for _, list := range []*regexp.Regexp{
		regexp.MustCompile(`each backend a driver package \(([^)]*)\)`),
		regexp.MustCompile(`dlock\.driver \(the driver's name: ([^)]*)\)`),
	} {
		m := list.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("lock/doc.go: no list matching %s", list)
			continue
		}
		for _, d := range drivers {
			if !regexp.MustCompile(`\b` + d + `\b`).MatchString(m[1]) {
				t.Errorf("lock/doc.go: the list (%s) leaves out the driver %s", m[1], d)
			}
		}
	}
}

// docPathRE matches a path of the repository's docs in a Go comment;
// docSectionRE one followed by a quoted section title.
var (
	docPathRE    = regexp.MustCompile(`\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_]\.md\b`)
	docSectionRE = regexp.MustCompile(`\b(docs/[A-Za-z0-9_./-]*\.md), "([^"]+)"`)
)

// TestGoCommentsNameDocs: a Go comment that names a file under docs/
// names one that exists, and a section it quotes after it (the path, a
// comma, then the title in quotes) is the start of a heading of that
// file, so that moving text between documents cannot leave the code
// pointing nowhere.
func TestGoCommentsNameDocs(t *testing.T) {
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for _, p := range docReferences(rel, readFile(t, rel)) {
			t.Error(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docReferences returns what is wrong with the docs that the comments of
// file (whose text is src) name.
func docReferences(file, src string) []string {
	var text strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if _, c, ok := strings.Cut(line, "//"); ok {
			text.WriteString(c + " ")
		}
	}
	flat := strings.Join(strings.Fields(text.String()), " ")
	var problems []string
	for _, p := range docPathRE.FindAllString(flat, -1) {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			problems = append(problems, fmt.Sprintf("%s: names %s: %v", file, p, err))
		}
	}
	for _, m := range docSectionRE.FindAllStringSubmatch(flat, -1) {
		b, err := os.ReadFile(filepath.Join(root, m[1]))
		if err != nil {
			continue // reported above
		}
		if !hasHeadingPrefix(string(b), m[2]) {
			problems = append(problems, fmt.Sprintf("%s: names %s, %q: no heading starts so", file, m[1], m[2]))
		}
	}
	return problems
}

// hasHeadingPrefix reports whether a heading of the Markdown text starts
// with title, ignoring case and a section number.
func hasHeadingPrefix(text, title string) bool {
	for _, line := range strings.Split(codeRE.ReplaceAllString(text, ""), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = strings.TrimLeft(h, "0123456789. ")
		if strings.HasPrefix(strings.ToLower(h), strings.ToLower(title)) {
			return true
		}
	}
	return false
}

// maxArchitectureLines is the most lines docs/architecture.md may have:
// a newcomer reads it first, whole.
const maxArchitectureLines = 300

// TestArchitecture keeps docs/architecture.md short, and its tree whole:
// every package directory under lock/, driver/ and internal/ (and
// internal/testsupport/) and every module's root is named there, so a new
// package cannot be left out.
func TestArchitecture(t *testing.T) {
	text := readFile(t, "docs/architecture.md")
	if n := strings.Count(text, "\n"); n > maxArchitectureLines {
		t.Errorf("docs/architecture.md has %d lines, more than %d", n, maxArchitectureLines)
	}
	for _, dir := range packageDirs(t, "lock", "driver", "internal") {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(dir) + `/`).MatchString(text) {
			t.Errorf("docs/architecture.md: the tree leaves out %s/", dir)
		}
	}
	// internal/testsupport's packages are listed under it, indented.
	for _, dir := range packageDirs(t, "internal/testsupport") {
		name := strings.TrimPrefix(dir, "internal/testsupport/")
		if dir == "internal/testsupport" || strings.Contains(name, "/") {
			continue
		}
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + `/`).MatchString(text) {
			t.Errorf("docs/architecture.md: the tree leaves out %s/ (under internal/testsupport/)", dir)
		}
	}
}

// packageDirs returns the directories under roots that hold Go files,
// but testdata and the packages inside a package already listed (a
// command's or a driver's parts are its own business).
func packageDirs(t *testing.T, roots ...string) []string {
	t.Helper()
	var dirs []string
	for _, r := range roots {
		entries, err := os.ReadDir(filepath.Join(root, r))
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Glob(filepath.Join(root, r, "*.go")); len(m) > 0 {
			dirs = append(dirs, r)
		}
		for _, e := range entries {
			if e.IsDir() && e.Name() != "testdata" {
				dirs = append(dirs, r+"/"+e.Name())
			}
		}
	}
	return dirs
}

// TestPostgresWireVersion: docs/wire/postgres.md names the schema
// version the driver installs (driver/postgres's schemaVersion).
func TestPostgresWireVersion(t *testing.T) {
	code := regexp.MustCompile(`(?m)^const schemaVersion = (\d+)$`).FindStringSubmatch(readFile(t, "driver/postgres/postgres.go"))
	doc := regexp.MustCompile("`version\\(\\)` is (\\d+)").FindStringSubmatch(readFile(t, "docs/wire/postgres.md"))
	if code == nil || doc == nil {
		t.Fatalf("schemaVersion found: %v; docs/wire/postgres.md's \"`version()` is N\" found: %v", code != nil, doc != nil)
	}
	if code[1] != doc[1] {
		t.Errorf("docs/wire/postgres.md says version() is %s; driver/postgres's schemaVersion is %s", doc[1], code[1])
	}
}
