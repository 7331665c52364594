package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// memCooldowns is a CooldownStore in memory, shared by "replicas".
type memCooldowns struct {
	m    map[string]time.Time
	wins map[string]store.QuotaWindows
	fail bool
}

func (m *memCooldowns) ListQuotaWindows(context.Context) (map[string]store.QuotaWindows, error) {
	if m.fail {
		return nil, errors.New("database down")
	}
	return m.wins, nil
}

func (m *memCooldowns) SyncCooldowns(_ context.Context, learnt map[string]time.Time, now time.Time) (map[string]time.Time, error) {
	if m.fail {
		return nil, errors.New("database down")
	}
	for id, u := range learnt {
		if u.After(m.m[id]) {
			m.m[id] = u
		}
	}
	out := map[string]time.Time{}
	for id, u := range m.m {
		if u.After(now) {
			out[id] = u
		}
	}
	return out, nil
}

// A cooldown one replica learns reaches another through the store at the
// next sync; one learnt while the store fails is stored at the next
// successful sync.
func TestSharerSharesCooldownsBetweenReplicas(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	o := service.Options{Clock: fakeclock.New(now)}
	st := &memCooldowns{m: map[string]time.Time{}}
	a, b := NewSharer(st, o), NewSharer(st, o)
	ctx := context.Background()

	a.Board().CoolDown("up_1", now.Add(time.Minute))
	if _, cooling := b.Board().CoolingUntil("up_1", now); cooling {
		t.Fatal("replica b knew before any sync")
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if until, cooling := b.Board().CoolingUntil("up_1", now); !cooling || !until.Equal(now.Add(time.Minute)) {
		t.Fatalf("replica b: cooling %v until %v", cooling, until)
	}

	st.fail = true
	b.Board().CoolDown("up_2", now.Add(time.Hour))
	if err := b.Sync(ctx); err == nil {
		t.Fatal("a failing store did not fail the sync")
	}
	st.fail = false
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, cooling := a.Board().CoolingUntil("up_2", now); !cooling {
		t.Fatal("the cooldown learnt while the store failed was lost")
	}
	// Learning a cooldown from the store does not store it again.
	if n := len(a.pending) + len(b.pending); n != 0 {
		t.Fatalf("%d cooldowns pending after the syncs", n)
	}
}

// The polled usage windows reach every replica's board at its sync; a
// window past its reset reads 0, and the thresholds compare against it.
func TestSharerReadsUsageWindows(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	reset := now.Add(time.Hour)
	db := &memCooldowns{m: map[string]time.Time{}, wins: map[string]store.QuotaWindows{
		"up_a": {FiveHour: store.QuotaWindow{Utilization: 95, ResetsAt: &reset}, SevenDay: store.QuotaWindow{Utilization: 40}},
	}}
	s := NewSharer(db, service.Options{Clock: fakeclock.New(now)})
	b := s.Board()
	if b.OverThreshold("up_a", 90, 0, now) {
		t.Fatal("over threshold before the usage was read")
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if five, seven := b.Utilization("up_a", now); five != 95 || seven != 40 {
		t.Fatalf("utilisation %v %v", five, seven)
	}
	for _, c := range []struct {
		max5h, max7d int
		at           time.Time
		over         bool
	}{
		{90, 0, now, true},
		{0, 50, now, false},
		{0, 40, now, true},
		{96, 0, now, false},
		{0, 0, now, false},
		{90, 0, reset, false}, // the 5-hour window has reset
	} {
		if got := b.OverThreshold("up_a", c.max5h, c.max7d, c.at); got != c.over {
			t.Errorf("thresholds %d/%d at %v: over %v, want %v", c.max5h, c.max7d, c.at.Sub(now), got, c.over)
		}
	}
}

// signalled reports each cooldown sync's reading of the clock.
type signalled struct {
	*memCooldowns
	synced chan time.Time
}

func (s signalled) SyncCooldowns(ctx context.Context, learnt map[string]time.Time, now time.Time) (map[string]time.Time, error) {
	out, err := s.memCooldowns.SyncCooldowns(ctx, learnt, now)
	s.synced <- now
	return out, err
}

// Run syncs each time the interval passes on the injected clock, reading
// the time from it, and returns when ctx ends.
func TestSharerRunsOnTheInjectedClock(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	st := signalled{&memCooldowns{m: map[string]time.Time{}}, make(chan time.Time)}
	s := NewSharer(st, service.Options{Clock: c})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, DefaultShareInterval) }()
	for i := 1; i <= 2; i++ {
		<-c.Armed()
		c.Advance(DefaultShareInterval)
		if at := <-st.synced; !at.Equal(fakeclock.Start.Add(time.Duration(i) * DefaultShareInterval)) {
			t.Fatalf("sync %d read %v, want the fake clock's time", i, at)
		}
	}
	cancel()
	<-done
}
