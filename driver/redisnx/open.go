package redisnx

import (
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
)

// Scheme and SchemeTLS (Scheme over TLS) are the URL schemes this package
// registers with lock.Open; see URLs in the package doc.
const Scheme, SchemeTLS = "redisnx", "redisnxs"

func init() {
	redisx.Register(Scheme, SchemeTLS, func(c redisx.Core) driver.Driver { return newDriver(c) })
}
