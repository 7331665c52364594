// Package service is the one shape of a long-lived part of a binary: it is
// built with Options (logger and clock, defaulted once by Init), and its
// background loops run in a Group the binary starts as a list and stops in
// reverse order.
package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
)

// Options are what every service is given besides its own dependencies.
type Options struct {
	// Logger gets the service's events; nil discards them.
	Logger *slog.Logger
	// Clock reads time and arms timers; nil is the real clock.
	Clock clock.Clock
}

// WithDefaults is o with a discarding logger and the real clock where unset.
func (o Options) WithDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Clock = clock.Or(o.Clock)
	return o
}

// Base is embedded by a service: its methods read s.Logger and s.Clock,
// which Init has set, so no service keeps defaulting accessors.
type Base struct {
	Logger *slog.Logger
	Clock  clock.Clock
}

func (b *Base) base() *Base { return b }

type withBase interface{ base() *Base }

// Init applies o's defaults to s's embedded Base and returns s; a service
// is constructed as service.Init(o, &pkg.Service{...}).
func Init[S withBase](o Options, s S) S {
	o = o.WithDefaults()
	b := s.base()
	b.Logger, b.Clock = o.Logger, o.Clock
	return s
}

// Every calls f each time interval has passed on c, counted from the end
// of the previous call, until ctx ends. It does not call f at once.
func Every(ctx context.Context, c clock.Clock, interval time.Duration, f func(context.Context)) {
	t, tick := c.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			f(ctx)
			if ctx.Err() != nil {
				return
			}
			t.Reset(interval)
		}
	}
}
