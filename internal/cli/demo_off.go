//go:build !demo

package cli

import (
	"fmt"
	"os"
)

// cmdDemo, in a dlock built without -tags demo, says how to get the demo
// (demoMissing).
func cmdDemo([]string) int {
	fmt.Fprint(os.Stderr, demoMissing)
	return exitUsage
}

func cmdDemoWorker([]string) int { return cmdDemo(nil) }
