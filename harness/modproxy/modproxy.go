// Package modproxy writes a Go module proxy as plain files, for
// GOPROXY=file://DIR, from the tagged commits of a local git repository:
// what the go command would download from a proxy once the tags are
// pushed, without the network. The release script and the packaging
// test use it.
//
// For each module version it writes, under DIR/<escaped module path>/@v/,
// VERSION.info ({"Version", "Time"}: the tagged commit's time),
// VERSION.mod (the go.mod at the tag), VERSION.zip (the module's files at
// the tag, as golang.org/x/mod/zip makes them: nested modules, vendor and
// the like left out) and list (one version a line).
package modproxy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Add writes the version of the module modPath whose directory in the git
// repository repo is subdir ("" for the repository's root) into the proxy
// at dir. The version's tag is version at the root and subdir/version
// otherwise, as the go command expects.
func Add(dir, repo, modPath, subdir, version string) error {
	mv := module.Version{Path: modPath, Version: version}
	if err := module.Check(modPath, version); err != nil {
		return err
	}
	tag := version
	if subdir != "" {
		tag = path.Join(subdir, version)
	}
	when, err := git(repo, "log", "-1", "--format=%cI", tag+"^{commit}")
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(when))
	if err != nil {
		return fmt.Errorf("tag %s: commit time %q: %v", tag, when, err)
	}
	gomod, err := git(repo, "show", tag+":"+path.Join(subdir, "go.mod"))
	if err != nil {
		return err
	}
	escPath, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, escVersion+".info"), info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, escVersion+".mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := writeZip(filepath.Join(vdir, escVersion+".zip"), mv, repo, tag, subdir); err != nil {
		return err
	}
	return addToList(filepath.Join(vdir, "list"), version)
}

// writeZip writes the module zip of mv from the tag's tree.
func writeZip(file string, mv module.Version, repo, tag, subdir string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := zip.CreateFromVCS(f, mv, repo, tag, subdir); err != nil {
		f.Close()
		return fmt.Errorf("zip of %s: %v", mv, err)
	}
	return f.Close()
}

// addToList adds version to the list file, once.
func addToList(file, version string) error {
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(b))
	if slices.Contains(versions, version) {
		return nil
	}
	versions = append(versions, version)
	return os.WriteFile(file, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// git runs git in repo and returns its output.
func git(repo string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
