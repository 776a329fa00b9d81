package chaos

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// The test binary is also the holder process of the scenarios that need a
// real child (SIGSTOP, SIGKILL): started with envHolder set, it runs
// holderMain instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(envHolder) != "" {
		os.Exit(holderMain())
	}
	// No testserver.Main: every scenario starts dedicated servers, stopped
	// by its own cleanup, and Main would exit before the table is printed.
	code := m.Run()
	printTable()
	os.Exit(code)
}

var results struct {
	sync.Mutex
	rows []Row
}

func record(row Row) {
	results.Lock()
	results.rows = append(results.rows, row)
	results.Unlock()
}

// envTable names a file to write the table of results to (make chaos).
const envTable = "DLOCK_CHAOS_TABLE"

func printTable() {
	results.Lock()
	rows := append([]Row(nil), results.rows...)
	results.Unlock()
	if len(rows) == 0 {
		return
	}
	table := FormatTable(rows)
	fmt.Print("\n" + table)
	if path := os.Getenv(envTable); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: writing %s: %v\n", path, err)
		}
	}
}
