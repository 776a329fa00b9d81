package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// logFlags are -v and -log-level, shared by the subcommands.
type logFlags struct {
	verbose bool
	level   string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&l.verbose, "v", false, "log events to stderr (same as -log-level info)")
	fs.StringVar(&l.level, "log-level", "warn", "structured log level on stderr: debug, info, warn, error or off")
}

// logger returns the slog.Logger the flags ask for, writing text to w, or
// an error for an unknown level.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	name := strings.ToLower(l.level)
	if l.verbose && (name == "warn" || name == "error" || name == "off") {
		name = "info"
	}
	var lv slog.Level
	switch name {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	case "off", "none":
		return slog.New(slog.DiscardHandler), nil
	default:
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn, error or off", l.level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv})), nil
}
