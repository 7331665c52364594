package routing

import (
	"context"
	"errors"
	"testing"
	"time"
)

// memCooldowns is a CooldownStore in memory, shared by "replicas".
type memCooldowns struct {
	m    map[string]time.Time
	fail bool
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
	clock := func() time.Time { return now }
	st := &memCooldowns{m: map[string]time.Time{}}
	a, b := NewSharer(st, clock, nil), NewSharer(st, clock, nil)
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
