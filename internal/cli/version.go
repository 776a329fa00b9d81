package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionLine is what dlock version prints: the module's version as the
// build recorded it (go install ...@v1.2.3 records v1.2.3; a build in a
// checkout records none: "devel", with the VCS revision when the build
// recorded it), and the Go version and platform.
func versionLine() string {
	version, vcs := "devel", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			vcs = " (" + rev
			if modified == "true" {
				vcs += ", modified"
			}
			vcs += ")"
		}
	}
	return fmt.Sprintf("dlock %s%s %s %s/%s", version, vcs, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
