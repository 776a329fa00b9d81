package redisnx

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A server whose ACL refuses the grant lists' commands (a user with the
// rules of a release before grant lists: no +rpush +llen +blpop) turns a
// Locker's grant lists off for good: its waits from then on queue with no
// list (NONCE 0) and are woken on their inbox, as before grant lists (one
// request more per hand-over). A wait that was refused its LLEN or BLPOP
// steps again at once without its list, which rewrites its queue entry
// with NONCE 0, so that releases wake it rather than push to a list it no
// longer reads. The scripts' own pushes, refused, fall back to the inbox
// message (prelude.lua's push).

// lists is a Locker's switch of grant lists.
type lists struct {
	off atomic.Bool // the server refused a grant list's command
	log atomic.Pointer[slog.Logger]
}

// refused reports whether one of errs is an ACL refusal, and turns the
// grant lists off then (logging it once).
func (s *lists) refused(errs ...error) bool {
	for _, err := range errs {
		if !isRefusal(err) {
			continue
		}
		if !s.off.Swap(true) {
			if l := s.log.Load(); l != nil {
				l.Info("dlock: redisnx: the server refused a grant list's command (ACL rules without +rpush +llen +blpop): waiters are woken on their inbox", "err", err)
			}
		}
		return true
	}
	return false
}

// isRefusal reports whether err is the server's ACL refusal (NOPERM), not
// a failure of the connection or of another kind.
func isRefusal(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM")
}

// SetLogger implements driver.LogSetter: l also gets the line that says
// the grant lists were turned off.
func (d *redisDriver) SetLogger(l *slog.Logger) {
	d.lists.log.Store(l)
	d.Core.SetLogger(l)
}
