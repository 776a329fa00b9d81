// Command noetcd is dlock without etcd's driver, for the tests of what
// such a build says about an etcd:// URL.
package main

import (
	"os"

	"github.com/dlock-go/dlock/internal/cli"
	_ "github.com/dlock-go/dlock/internal/cli/drivers"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
