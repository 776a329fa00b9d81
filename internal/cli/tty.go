package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// isTerminal reports whether f is a character device (a terminal), which
// is all dlock needs to decide whether to redraw lines in place.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\x1b[K"

// statusLine redraws one line on a terminal every tick with what text
// returns, until stop, which erases it.
type statusLine struct {
	stop func()
}

// startStatusLine starts redrawing after delay (so that a lock granted at
// once does not flash a line). Nothing is drawn when w is not a terminal.
func startStatusLine(w io.Writer, term bool, delay, tick time.Duration, text func(elapsed time.Duration) string) *statusLine {
	if !term {
		return &statusLine{stop: func() {}}
	}
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(delay)
		defer t.Stop()
		drawn := false
		for {
			select {
			case <-done:
				if drawn {
					fmt.Fprint(w, clearLine)
				}
				return
			case <-t.C:
				fmt.Fprint(w, clearLine+text(time.Since(start)))
				drawn = true
				t.Reset(tick)
			}
		}
	}()
	var once sync.Once
	return &statusLine{stop: func() { once.Do(func() { close(done); wg.Wait() }) }}
}

// seconds formats d as seconds with one decimal, "3.2s".
func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
