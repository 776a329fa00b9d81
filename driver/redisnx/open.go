package redisnx

import (
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
)

// URL schemes this package registers with lock.Open: SchemeTLS is Scheme
// over TLS. See the package doc's URLs section; internal/redisx reads the
// URL, for rediswatch too, so the same URL makes the same client.
const (
	Scheme    = "redisnx"
	SchemeTLS = "redisnxs"
)

func init() {
	redisx.Register(Scheme, SchemeTLS, func(c redisx.Core) driver.Driver { return newDriver(c) })
}
