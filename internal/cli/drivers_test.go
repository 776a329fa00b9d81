package cli

// The tests run dlock's code in process too, with the main module's
// backends (cmd/dlock has etcd's too).
import _ "github.com/dlock-go/dlock/internal/cli/drivers"
