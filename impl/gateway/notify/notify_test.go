package notify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

// P-RUNTIME-3: notifications arrive; a killed session is re-established and
// announces itself with an empty-payload callback (missed changes).
func TestListenerDeliversAndReconnects(t *testing.T) {
	url := pgtest.URL(t)
	old := PingInterval
	PingInterval = 150 * time.Millisecond
	t.Cleanup(func() { PingInterval = old })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	channel := fmt.Sprintf("pillar_test_%d", time.Now().UnixNano()%1e9)
	got := make(chan string, 16)
	conns := make(chan bool, 16)
	l := New(url, channel, service.Options{}, func(_ context.Context, p string) { got <- p })
	l.MinBackoff = 10 * time.Millisecond
	l.Connected = func(up bool) { conns <- up }
	go l.Run(ctx)

	expect := func(want string) {
		t.Helper()
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("payload %q, want %q", p, want)
			}
		case <-ctx.Done():
			t.Fatalf("no callback (want %q)", want)
		}
	}
	if up := <-conns; !up {
		t.Fatal("first state not connected")
	}
	expect("") // initial catch-up

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	notify := func(p string) {
		if _, err := admin.Exec(ctx, "SELECT pg_notify($1, $2)", channel, p); err != nil {
			t.Fatal(err)
		}
	}
	notify("7")
	expect("7")
	time.Sleep(3 * PingInterval) // idle past several pings: the session must survive them
	notify("8")
	expect("8")

	// Kill the listening backend: the listener notices, reconnects, catches up.
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", ApplicationName); err != nil {
		t.Fatal(err)
	}
	if up := <-conns; up {
		t.Fatal("loss not reported")
	}
	if up := <-conns; !up {
		t.Fatal("reconnect not reported")
	}
	expect("")
	notify("9")
	expect("9")
}

// A session that cannot be opened is retried after a backoff armed on the
// injected clock, doubling from MinBackoff up to MaxBackoff, each retry
// announcing the loss.
func TestListenerBacksOffOnTheClock(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	l := New("postgres://%zz", Channel, service.Options{Clock: c}, func(context.Context, string) {
		t.Error("a session that never connected delivered")
	})
	l.MinBackoff, l.MaxBackoff = time.Second, 5*time.Second
	losses := make(chan bool, 1)
	l.Connected = func(up bool) { losses <- up }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if up := <-losses; up {
			t.Fatal("reported connected")
		}
		if d := <-c.Armed(); d != want {
			t.Fatalf("backoff %v, want %v", d, want)
		}
		c.Advance(want)
	}
	<-losses
	<-c.Armed()
	cancel()
	<-done
}
