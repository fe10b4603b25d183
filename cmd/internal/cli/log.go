package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// newLogger returns a logger that writes `name: message key=value` lines for
// people on w: no timestamps or levels, the style of every other message.
func newLogger(w io.Writer, name string, verbose bool) *slog.Logger {
	return newLoggerAs(w, name, verbose, "text")
}

// newLoggerAs is newLogger in format "text", or JSON lines (slog's own
// handler, with the program's name in each) in format "json", for agents and
// log pipelines.
func newLoggerAs(w io.Writer, name string, verbose bool, format string) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("program", name)
	}
	return slog.New(&lineHandler{w: w, name: name, level: level, mu: new(sync.Mutex)})
}

type lineHandler struct {
	w     io.Writer
	name  string
	level slog.Level
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.name)
	b.WriteString(": ")
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%s", a.Key, quoteIfNeeded(a.Value.String()))
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), attrs...)
	return &c
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }

// logFormatFlag is --log-format, the same in every command that logs.
type logFormatFlag struct {
	LogFormat string `enum:"text,json" default:"text" group:"output" help:"Messages on stderr as text lines for people, or JSON lines (log/slog) for agents and log pipelines."`
}

// messages is where a command's messages go: stderr itself for text, or,
// with --log-format json, a writer that makes each line a JSON record.
func (f logFormatFlag) messages(stderr io.Writer, name string) io.Writer {
	if f.LogFormat != "json" {
		return stderr
	}
	return logWriter{log: newLoggerAs(stderr, name, false, "json"), prefix: name + ": "}
}

// logWriter turns lines written to it (`name: message`) into log records, so
// that messages printed with warnf join a JSON log as records of their own.
type logWriter struct {
	log    *slog.Logger
	prefix string
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line = strings.TrimPrefix(line, w.prefix); line != "" {
			w.log.Info(line)
		}
	}
	return len(p), nil
}
