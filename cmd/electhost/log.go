package main

import (
	"io"
	"log/slog"
)

// newLogger returns a text or JSON slog logger writing to w.
func newLogger(w io.Writer, jsonLogs bool, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if jsonLogs {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
