// Package logging builds the pillar binaries' JSON logger from a level
// flag, so the agent, controller and node log alike.
package logging

import (
	"fmt"
	"log/slog"
	"os"
)

// New is a JSON logger on stderr at level ("debug", "info", "warn",
// "error").
func New(level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}
