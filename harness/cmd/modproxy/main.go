// Command modproxy adds a module version, from a tag of a local git
// repository, to a Go module proxy made of files (GOPROXY=file://DIR):
//
//	modproxy -dir DIR -repo REPO -module PATH [-subdir SUBDIR] -version VERSION
//
// The tag is VERSION, or SUBDIR/VERSION for a module in SUBDIR. See
// package modproxy. scripts/release.sh uses it to fill go.sum before the
// tags are pushed.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/dlock-go/dlock/harness/modproxy"
)

func main() {
	dir := flag.String("dir", "", "the proxy's directory")
	repo := flag.String("repo", ".", "the git repository")
	mod := flag.String("module", "", "the module path")
	subdir := flag.String("subdir", "", "the module's directory in the repository (empty: its root)")
	version := flag.String("version", "", "the version (a tag)")
	flag.Parse()
	if *dir == "" || *mod == "" || *version == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -dir DIR -repo REPO -module PATH [-subdir SUBDIR] -version VERSION")
		os.Exit(2)
	}
	if err := modproxy.Add(*dir, *repo, *mod, *subdir, *version); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}
