package main

import (
	"os"

	"github.com/dlock-go/dlock/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
