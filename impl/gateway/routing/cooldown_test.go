package routing

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestCooldownUntil(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, c := range []struct {
		name   string
		status int
		h      http.Header
		want   time.Duration // from now; -1: no cooldown
	}{
		{"200 is no limit", 200, hdr("Retry-After", "9"), -1},
		{"500 is no limit", 500, nil, -1},
		{"429 without hints", 429, nil, DefaultRateLimitCooldown},
		{"529 without hints", 529, nil, DefaultOverloadCooldown},
		{"retry-after seconds", 429, hdr("Retry-After", "42"), 42 * time.Second},
		{"retry-after date", 429, hdr("Retry-After", now.Add(2*time.Minute).Format(http.TimeFormat)), 2 * time.Minute},
		{"retry-after wins over resets", 429, hdr("Retry-After", "7",
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", now.Add(time.Hour).Format(time.RFC3339)), 7 * time.Second},
		{"reset of the exhausted limit", 429, hdr(
			"anthropic-ratelimit-requests-remaining", "5", "anthropic-ratelimit-requests-reset", now.Add(time.Hour).Format(time.RFC3339),
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", now.Add(90*time.Second).Format(time.RFC3339)), 90 * time.Second},
		{"latest of two exhausted limits", 429, hdr(
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", now.Add(3*time.Minute).Format(time.RFC3339),
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", now.Add(90*time.Second).Format(time.RFC3339)), 3 * time.Minute},
		{"unified subscription reset in unix seconds", 429, hdr("anthropic-ratelimit-unified-reset", strconv.FormatInt(now.Add(2*time.Hour).Unix(), 10)), 2 * time.Hour},
		{"a reset in the past keeps the default", 429, hdr("anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", now.Add(-time.Minute).Format(time.RFC3339)), DefaultRateLimitCooldown},
		{"absurd retry-after is capped", 429, hdr("Retry-After", "99999999"), MaxCooldown},
		{"garbage headers keep the default", 429, hdr("Retry-After", "soon", "anthropic-ratelimit-unified-reset", "x"), DefaultRateLimitCooldown},
	} {
		got, ok := CooldownUntil(c.status, c.h, now)
		if c.want < 0 {
			if ok {
				t.Errorf("%s: cooldown until %v, want none", c.name, got)
			}
			continue
		}
		if !ok || !got.Equal(now.Add(c.want)) {
			t.Errorf("%s: cooldown until %v (%v), want now+%v", c.name, got, ok, c.want)
		}
	}
}

func TestBoardCooldownOnlyExtends(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var told []time.Time
	b := NewBoard(func(id string, until time.Time) { told = append(told, until) })
	if _, cooling := b.CoolingUntil("up_1", now); cooling {
		t.Fatal("an unknown upstream is cooling down")
	}
	if !b.CoolDown("up_1", now.Add(time.Minute)) {
		t.Fatal("the first cooldown did not change anything")
	}
	if b.CoolDown("up_1", now.Add(time.Second)) {
		t.Fatal("a shorter cooldown shortened the longer one")
	}
	if until, cooling := b.CoolingUntil("up_1", now.Add(30*time.Second)); !cooling || !until.Equal(now.Add(time.Minute)) {
		t.Fatalf("cooling %v until %v", cooling, until)
	}
	if _, cooling := b.CoolingUntil("up_1", now.Add(time.Minute)); cooling {
		t.Fatal("still cooling down at the cooldown's end")
	}
	b.Learn("up_2", now.Add(time.Hour))
	if _, cooling := b.CoolingUntil("up_2", now); !cooling {
		t.Fatal("a learnt cooldown is not in force")
	}
	if len(told) != 1 {
		t.Fatalf("onCooldown told %d times, want once (learnt and unchanged cooldowns are not reported)", len(told))
	}
	st := b.Begin("up_1")
	if got := b.Read("up_1", now).InFlight; got != 1 {
		t.Fatalf("in flight %d, want 1", got)
	}
	st.End()
	if got := b.Read("up_1", now); got.InFlight != 0 || !got.CooldownUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("read %+v", got)
	}
}

// The request path reads the board without allocating.
func TestBoardReadsDoNotAllocate(t *testing.T) {
	b := NewBoard(nil)
	b.CoolDown("up_1", time.Unix(2000, 0))
	now := time.Unix(1000, 0)
	if n := testing.AllocsPerRun(100, func() {
		b.CoolingUntil("up_1", now)
		b.CoolingUntil("up_2", now)
		b.Begin("up_1").End()
	}); n != 0 {
		t.Fatalf("%v allocations per read", n)
	}
}
