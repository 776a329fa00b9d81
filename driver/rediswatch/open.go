package rediswatch

import (
	"context"
	"net/url"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
)

func init() {
	lock.Register(Scheme, open)
	lock.Register(SchemeTLS, open)
}

// open makes the driver, and the client it owns, from a URL: see the
// package doc's URLs section (internal/redisx reads it, for
// redisnx too, so the same URL makes the same client).
func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	c, err := redisx.Parse(u, SchemeTLS)
	if err != nil {
		return nil, nil, err
	}
	core, lo := redisx.NewCore("rediswatch", c.NewClient(), &Options{Options: *c.Options, Prefix: c.Prefix}, true)
	return newDriver(core), lo, nil
}
