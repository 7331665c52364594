// Package logging builds the pillar binaries' JSON logger from a level
// flag, so the agent, controller and node log alike.
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// New is a JSON logger on w (the command's stderr) at level ("debug",
// "info", "warn", "error").
func New(w io.Writer, level string) (*slog.Logger, error) {
	lvl, err := Level(level)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// Level parses the --log-level flag (checked with the other flags,
// before anything starts).
func Level(level string) (slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return lvl, fmt.Errorf("--log-level: %w", err)
	}
	return lvl, nil
}
