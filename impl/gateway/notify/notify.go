// Package notify keeps a PostgreSQL LISTEN session open on the configuration
// channel and calls back on every notification, so replicas pick up each
// other's changes in well under a second. A dropped session is re-established
// with backoff; every (re)connect also triggers a callback, because changes
// committed while disconnected were never notified.
package notify

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pillarhq/pillar/impl/service"
)

// Channel is the notification channel configuration changes are announced on.
const Channel = "pillar_config"

// Listener holds one LISTEN session.
type Listener struct {
	service.Base
	connString string
	channel    string
	onChange   func(ctx context.Context, payload string)
	// MinBackoff and MaxBackoff bound reconnect delays.
	MinBackoff, MaxBackoff time.Duration
	// Connected, when set, receives true on every successful LISTEN and false
	// on every loss (tests and metrics observe the session with it).
	Connected func(bool)
}

// New returns a Listener; Run starts it.
func New(connString, channel string, o service.Options, onChange func(ctx context.Context, payload string)) *Listener {
	return service.Init(o, &Listener{connString: connString, channel: channel, onChange: onChange,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second})
}

// Run listens until ctx ends.
func (l *Listener) Run(ctx context.Context) {
	backoff := l.MinBackoff
	for ctx.Err() == nil {
		connected, err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = l.MinBackoff
		}
		if l.Connected != nil {
			l.Connected(false)
		}
		l.Logger.Warn("config notification session lost; reconnecting", "error", err, "backoff", backoff)
		if !l.wait(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, l.MaxBackoff)
	}
}

// wait waits d on the clock; false when ctx ended first.
func (l *Listener) wait(ctx context.Context, d time.Duration) bool {
	t, c := l.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-c:
		return true
	}
}

// ApplicationName labels the LISTEN session in pg_stat_activity.
const ApplicationName = "pillar-config-listener"

// PingInterval is how long the session waits quietly before checking that
// the server is still there: a silently partitioned connection would
// otherwise wait for notifications forever.
var PingInterval = 15 * time.Second

// session connects, listens and delivers notifications until an error.
func (l *Listener) session(ctx context.Context) (connected bool, err error) {
	cfg, err := pgx.ParseConfig(l.connString)
	if err != nil {
		return false, err
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = ApplicationName
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return false, err
	}
	if l.Connected != nil {
		l.Connected(true)
	}
	// Anything committed before LISTEN took effect was not announced to us.
	l.onChange(ctx, "")
	for {
		wctx, cancel := context.WithTimeout(ctx, PingInterval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.onChange(ctx, n.Payload)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case wctx.Err() != nil:
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, err
			}
		default:
			return true, err
		}
	}
}
