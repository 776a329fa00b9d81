package cli

// The tests run dlock's code in process too, with the backends cmd/dlock
// has.
import _ "github.com/dlock-go/dlock/internal/cli/drivers"
