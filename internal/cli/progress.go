package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// progressEvery is how long a waiting dlock run lets pass between two
// "waiting" records in its log when stderr is not a terminal: every 5s for
// the first minute, then every 30s, so that a cron or CI log shows what
// dlock waits for without filling up on a long wait.
func progressEvery(elapsed time.Duration) time.Duration {
	if elapsed < time.Minute {
		return 5 * time.Second
	}
	return 30 * time.Second
}

// startProgressLog logs, while dlock waits for the key and stderr is not a
// terminal (where startStatusLine draws instead), an info record every
// progressEvery: what it waits for, for how long, and who holds the key
// when that is known (holderText). Nothing is logged below info level
// (without -v). Stop it once the wait is over.
func (cfg *runConfig) startProgressLog(began time.Time) *statusLine {
	if !cfg.log.Enabled(context.Background(), slog.LevelInfo) {
		return &statusLine{stop: func() {}}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(progressEvery(0))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			waited := time.Since(began)
			attrs := []any{"key", cfg.key, "waited", waited.Round(time.Second), "backend", backendName(cfg.url)}
			if cfg.limit > 0 {
				attrs = append(attrs, "limit", cfg.limit)
			}
			if !cfg.wait.forever {
				attrs = append(attrs, "gives_up_after", cfg.wait.d)
			}
			if h := cfg.holder(); h != "" {
				attrs = append(attrs, "holder", h)
			}
			cfg.log.Info("dlock: waiting for "+cfg.what(), attrs...)
			t.Reset(progressEvery(waited))
		}
	}()
	var once sync.Once
	return &statusLine{stop: func() { once.Do(func() { close(done); wg.Wait() }) }}
}

// holder describes who holds cfg.key, for the waiting log, once acquire
// has opened the backend; "" when nothing is known.
func (cfg *runConfig) holder() string {
	cfg.mu.Lock()
	locker := cfg.locker
	cfg.mu.Unlock()
	if locker == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return holderText(ctx, locker, cfg.key)
}

// holderText is the single place that describes the holder of key for
// dlock's waiting messages, from lock.Inspect: the first holder's mode,
// owner and time left (and how many hold a shared key or a semaphore); ""
// when the backend cannot tell or did not answer in time, and the
// messages then leave the holder out.
func holderText(ctx context.Context, locker *lock.Locker, key string) string {
	st, err := locker.Inspect(ctx, key)
	if err != nil || !st.Held() {
		return ""
	}
	h := st.Holders[0]
	owner := h.Owner
	if h.Foreign {
		owner = strconv.Quote(owner) + " (foreign)"
	}
	text := fmt.Sprintf("%s %s", h.Mode, owner)
	if h.Mode == lock.Permit {
		text = fmt.Sprintf("%d of %d permits, first %s", len(st.Holders), h.Limit, owner)
	} else if len(st.Holders) > 1 {
		text += fmt.Sprintf(" and %d more", len(st.Holders)-1)
	}
	if h.Remaining > 0 && h.Remaining != lock.NoExpiry {
		text += fmt.Sprintf(", %v left", h.Remaining.Round(time.Millisecond))
	}
	return text
}
