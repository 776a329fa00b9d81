package cli

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// routeLibraryLogs sends what client libraries print on their own to l at
// debug level, instead of into the command's stderr: go-redis's connection
// pool messages (a refused connection is reported to the user once, as an
// error) and whatever uses the standard log package, such as
// go-zookeeper's session events.
func routeLibraryLogs(l *slog.Logger) {
	redis.SetLogger(redisLogger{l})
	log.SetFlags(0)
	log.SetOutput(logWriter{l})
}

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.Debug("redis: " + fmt.Sprintf(format, v...))
}

type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
