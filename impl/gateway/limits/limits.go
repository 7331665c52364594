// Package limits enforces a principal's default_limits: at most max requests,
// max tokens, or a budget of limit US dollars, per window of window_secs. Counting happens in memory on the
// request path (a map lookup under a mutex); a background sync adds each
// replica's counts to shared windows in the database once a second and reads
// back the cluster's totals, so every replica enforces the cluster-wide
// limit, overshooting by at most what the other replicas admitted since
// their last sync.
//
// Windows are aligned to the Unix epoch; the count a request is checked
// against is the sliding-window estimate current + previous × (the part of
// the previous window still inside the last window_secs), which does not let
// a burst at a window boundary through twice.
package limits

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Kind is what a limit counts.
type Kind uint8

const (
	// Requests counts admitted /v1/messages requests.
	Requests Kind = iota + 1
	// Tokens counts input, cache-creation and output tokens of finished
	// requests (cache reads are not counted, as with the provider's own
	// input-token limits).
	Tokens
	// USD counts the cost of finished requests in nano-dollars (package
	// money): a budget. Like Tokens it refuses once the window's spend
	// reached the limit, since a request's cost is known only afterwards,
	// so a budget is overshot by at most the cost of the requests in
	// flight when it was reached (plus, across replicas, what the others
	// admitted since their last sync).
	USD
)

func (k Kind) String() string {
	switch k {
	case Requests:
		return "requests"
	case Tokens:
		return "tokens"
	case USD:
		return "usd"
	}
	return "unknown"
}

func kindOf(s string) (Kind, bool) {
	switch s {
	case "requests":
		return Requests, true
	case "tokens":
		return Tokens, true
	case "usd":
		return USD, true
	}
	return 0, false
}

// MaxWindow bounds window_secs (31 days), as the admin API does.
const MaxWindow = 31 * 24 * time.Hour

// Limit is one element of default_limits.
type Limit struct {
	Kind   Kind
	Window time.Duration // whole seconds
	Max    int64
}

func (l Limit) String() string {
	if l.Kind == USD {
		return fmt.Sprintf("budget of %s USD per %ds", money.Nanos(l.Max), int64(l.Window/time.Second))
	}
	return fmt.Sprintf("%d %s per %ds", l.Max, l.Kind, int64(l.Window/time.Second))
}

// Parse reads a default_limits array ({"kind","window_secs","max"}
// elements, or {"kind":"usd","window_secs","limit":"25.00"} for a budget,
// its Max in nano-dollars). Null or empty means no limits; elements
// repeating a kind and window merge into the smallest max.
func Parse(raw json.RawMessage) ([]Limit, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var elems []struct {
		Kind       string  `json:"kind"`
		WindowSecs int64   `json:"window_secs"`
		Max        int64   `json:"max"`
		USD        *string `json:"limit"`
	}
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("default_limits: %w", err)
	}
	out := make([]Limit, 0, len(elems))
	for i, e := range elems {
		k, ok := kindOf(e.Kind)
		if !ok {
			return nil, fmt.Errorf("default_limits[%d].kind: %q is none of requests, tokens, usd", i, e.Kind)
		}
		if k == USD {
			if e.USD == nil || e.Max != 0 {
				return nil, fmt.Errorf(`default_limits[%d]: a usd budget has "limit" (a decimal string such as "25.00") and no "max"`, i)
			}
			n, err := money.ParseUSD(*e.USD)
			if err != nil {
				return nil, fmt.Errorf("default_limits[%d].limit: %w", i, err)
			}
			if n < 1 {
				return nil, fmt.Errorf("default_limits[%d].limit: must be more than 0", i)
			}
			e.Max = int64(n)
		} else if e.USD != nil {
			return nil, fmt.Errorf(`default_limits[%d].limit: only a usd budget has "limit"; %s limits have "max"`, i, e.Kind)
		}
		w := time.Duration(e.WindowSecs) * time.Second
		if e.WindowSecs < 1 || w > MaxWindow {
			return nil, fmt.Errorf("default_limits[%d].window_secs: %d is outside 1-%d", i, e.WindowSecs, int64(MaxWindow/time.Second))
		}
		if e.Max < 1 {
			return nil, fmt.Errorf("default_limits[%d].max: must be at least 1", i)
		}
		// Two elements of one kind and window share a count: the
		// smaller max is the one that binds.
		if j := slices.IndexFunc(out, func(l Limit) bool { return l.Kind == k && l.Window == w }); j >= 0 {
			out[j].Max = min(out[j].Max, e.Max)
			continue
		}
		out = append(out, Limit{Kind: k, Window: w, Max: e.Max})
	}
	return out, nil
}

// Store holds the shared windows (store.Store implements it).
type Store interface {
	SyncLimitWindows(ctx context.Context, deltas []store.LimitWindow, now time.Time) ([]store.LimitWindow, error)
}

type key struct {
	principal string
	kind      Kind
	window    int64 // seconds
	start     int64 // unix seconds, a multiple of window
}

// cell is one window's count: shared is the cluster total at the last sync
// (this replica's synced counts included), inflight what the running sync
// is adding, pending what was counted since.
type cell struct{ shared, inflight, pending int64 }

func (c *cell) count() int64 { return c.shared + c.inflight + c.pending }

// Limiter counts and checks. The zero value is not usable; use New.
type Limiter struct {
	service.Base
	st    Store
	every time.Duration

	mu      sync.Mutex
	cells   map[key]*cell
	failing bool // the last sync failed
}

// Options configures a Limiter.
type Options struct {
	// Store shares counts between replicas; nil counts this process only.
	Store Store
	// SyncEvery is the sync period (default 1 s).
	SyncEvery time.Duration
	// Logger (nil: discards) and Clock (nil: the real clock) go to
	// service.Init.
	Logger *slog.Logger
	Clock  clock.Clock
}

// New returns a Limiter; Run syncs it.
func New(o Options) *Limiter {
	if o.SyncEvery <= 0 {
		o.SyncEvery = time.Second
	}
	return service.Init(service.Options{Logger: o.Logger, Clock: o.Clock}, &Limiter{st: o.Store, every: o.SyncEvery, cells: map[key]*cell{}})
}

// Refusal says which limit refused a request and when to retry.
type Refusal struct {
	Limit      Limit
	RetryAfter time.Duration
}

// Message is the 429's error message: a budget says budget, the others
// say limit.
func (r *Refusal) Message() string {
	if r.Limit.Kind == USD {
		return "principal budget exhausted: " + r.Limit.String() + "; retry after the Retry-After seconds"
	}
	return "principal limit reached: " + r.Limit.String() + "; retry after the Retry-After seconds"
}

// Standing is where a principal stands against one limit, as the
// anthropic-ratelimit-* response headers report it.
type Standing struct {
	Max       int64 // 0: the principal has no limit of this kind
	Remaining int64
	// Reset is when the limit is fully replenished: the sliding estimate
	// reaches zero once the windows counted so far have both passed.
	Reset time.Time
}

// Status is a principal's standing per kind, indexed by Kind. Of several
// limits of one kind, the one with the least remaining is reported: it is
// the one that refuses first.
type Status [3]Standing

// Admit checks every limit of a principal and, when all allow, counts the
// request against its request limits. A tokens limit refuses once the
// window's tokens reached max (a request's tokens are known only after it).
func (l *Limiter) Admit(principal string, ls []Limit) *Refusal {
	return l.AdmitStatus(principal, ls, nil)
}

// AdmitStatus is Admit that also fills st (when not nil) with the
// principal's standing after the decision, computed from the counts Admit
// reads anyway: no further lock, lookup or allocation.
func (l *Limiter) AdmitStatus(principal string, ls []Limit, st *Status) *Refusal {
	if len(ls) == 0 {
		return nil
	}
	now := l.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var worst *Refusal
	// The counts per limit, kept for the status (principals have a
	// handful of limits; past 8 the status reads them again).
	var counts [8]windowCounts
	for i, lim := range ls {
		c := l.windows(principal, lim, now)
		if i < len(counts) {
			counts[i] = c
		}
		if c.estimate() > float64(lim.Max-1) {
			r := &Refusal{Limit: lim, RetryAfter: retryAfter(c.cur, c.prev, c.frac, lim)}
			if worst == nil || r.RetryAfter > worst.RetryAfter {
				worst = r
			}
		}
	}
	if worst == nil {
		for _, lim := range ls {
			if lim.Kind == Requests {
				l.cell(principal, lim, now).pending++
			}
		}
	}
	if st == nil {
		return worst
	}
	*st = Status{}
	for i, lim := range ls {
		c := counts[min(i, len(counts)-1)]
		if i >= len(counts) {
			c = l.windows(principal, lim, now) // the request is counted already
		} else if worst == nil && lim.Kind == Requests {
			c.cur++ // this request, counted above
		}
		s, w := windowStart(lim, now)
		reset := now.UTC().Truncate(time.Second)
		switch {
		case c.cur > 0:
			reset = time.Unix(s+2*w, 0).UTC()
		case c.prev > 0:
			reset = time.Unix(s+w, 0).UTC()
		}
		st.note(lim, c.estimate(), reset)
	}
	return worst
}

// note records one limit's standing when it leaves less room than the one
// already noted for its kind. Reset is when the estimate falls to zero
// with no further traffic: the end of the next window when the current
// one has counts, the end of this one when only the previous one has.
func (st *Status) note(lim Limit, est float64, reset time.Time) {
	if int(lim.Kind) >= len(st) {
		return
	}
	rem := max(0, lim.Max-int64(math.Ceil(est)))
	s := &st[lim.Kind]
	if s.Max == 0 || rem < s.Remaining {
		*s = Standing{Max: lim.Max, Remaining: rem, Reset: reset}
	}
}

// AddCost counts a finished request's cost against the principal's
// budgets (USD limits).
func (l *Limiter) AddCost(principal string, ls []Limit, cost money.Nanos) {
	l.add(principal, ls, USD, int64(cost))
}

// AddTokens counts a finished request's tokens against the principal's
// token limits.
func (l *Limiter) AddTokens(principal string, ls []Limit, n int64) {
	l.add(principal, ls, Tokens, n)
}

func (l *Limiter) add(principal string, ls []Limit, kind Kind, n int64) {
	if n <= 0 {
		return
	}
	now := l.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lim := range ls {
		if lim.Kind == kind {
			l.cell(principal, lim, now).pending += n
		}
	}
}

// BudgetUsed is how full the fullest of a principal's budgets (usd limits)
// is, as the sliding estimate Admit checks (1: the next request is
// refused); ok is false when the principal has no budget. It reads the
// cluster counts of the last sync plus this replica's since.
func (l *Limiter) BudgetUsed(principal string, ls []Limit) (ratio float64, ok bool) {
	// A scrape asks for every principal: those without a budget do not
	// take the lock the request path admits under.
	if !slices.ContainsFunc(ls, func(lim Limit) bool { return lim.Kind == USD && lim.Max > 0 }) {
		return 0, false
	}
	now := l.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lim := range ls {
		if lim.Kind != USD || lim.Max <= 0 {
			continue
		}
		ok = true
		ratio = max(ratio, l.windows(principal, lim, now).estimate()/float64(lim.Max))
	}
	return ratio, ok
}

func windowStart(lim Limit, now time.Time) (start, w int64) {
	w = int64(lim.Window / time.Second)
	t := now.Unix()
	return t - t%w, w
}

// cell returns the cell of the window containing now, creating it.
func (l *Limiter) cell(principal string, lim Limit, now time.Time) *cell {
	s, w := windowStart(lim, now)
	k := key{principal, lim.Kind, w, s}
	c := l.cells[k]
	if c == nil {
		c = &cell{}
		l.cells[k] = c
	}
	return c
}

// windowCounts are the current and previous windows' counts of a limit and
// how far into the current window now is (0 to 1).
type windowCounts struct {
	cur, prev int64
	frac      float64
}

// estimate is the sliding-window count.
func (c windowCounts) estimate() float64 { return float64(c.prev)*(1-c.frac) + float64(c.cur) }

func (l *Limiter) windows(principal string, lim Limit, now time.Time) (c windowCounts) {
	s, w := windowStart(lim, now)
	if x := l.cells[key{principal, lim.Kind, w, s}]; x != nil {
		c.cur = x.count()
	}
	if x := l.cells[key{principal, lim.Kind, w, s - w}]; x != nil {
		c.prev = x.count()
	}
	c.frac = float64(now.UnixNano()-s*int64(time.Second)) / float64(lim.Window)
	return c
}

// retryAfter is how long until the estimate falls to max-1 with no further
// traffic: within this window when only the previous window's share is in
// the way, else in the next one.
func retryAfter(cur, prev int64, frac float64, lim Limit) time.Duration {
	room := float64(lim.Max - 1)
	var at float64 // in windows from the current window's start
	switch {
	case float64(cur) <= room && prev == 0:
		at = frac
	case float64(cur) <= room:
		at = 1 - (room-float64(cur))/float64(prev)
	default:
		at = 1 + math.Max(0, 1-room/float64(cur))
	}
	// Milliseconds are precise enough for Retry-After and hide float noise.
	d := time.Duration((at - frac) * float64(lim.Window)).Round(time.Millisecond)
	return max(d, time.Second)
}

// Run syncs every period until ctx ends, then once more, so counts taken
// just before a shutdown reach the other replicas.
func (l *Limiter) Run(ctx context.Context) {
	service.Every(ctx, l.Clock, l.every, func(ctx context.Context) { _ = l.Sync(ctx) }) // Sync logs its own failures
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = l.Sync(fctx)
	cancel()
}

// Sync adds this replica's new counts to the shared windows and takes the
// cluster totals back. On a storage error the counts stay pending and the
// limiter keeps enforcing what it knows.
func (l *Limiter) Sync(ctx context.Context) error {
	now := l.Clock.Now()
	l.mu.Lock()
	var deltas []store.LimitWindow
	for k, c := range l.cells {
		if k.start+2*k.window <= now.Unix() {
			delete(l.cells, k) // out of every estimate
			continue
		}
		if c.pending != 0 {
			deltas = append(deltas, store.LimitWindow{PrincipalID: k.principal, Kind: k.kind.String(), WindowSecs: k.window, Start: k.start, Count: c.pending})
			c.inflight, c.pending = c.pending, 0
		}
	}
	l.mu.Unlock()
	if l.st == nil {
		l.mu.Lock()
		for _, c := range l.cells {
			c.shared += c.inflight
			c.inflight = 0
		}
		l.mu.Unlock()
		return nil
	}
	rows, err := l.st.SyncLimitWindows(ctx, deltas, now)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		for _, c := range l.cells {
			c.pending += c.inflight
			c.inflight = 0
		}
		if !l.failing {
			// Once per outage, not once a second.
			l.Logger.Warn("limit windows not synced; enforcing this replica's counts until the database is back", "error", err)
			l.failing = true
		}
		return err
	}
	if l.failing {
		l.Logger.Info("limit windows synced again")
		l.failing = false
	}
	for _, c := range l.cells {
		c.inflight = 0
	}
	for _, r := range rows {
		k, ok := kindOf(r.Kind)
		if !ok {
			continue
		}
		key := key{r.PrincipalID, k, r.WindowSecs, r.Start}
		c := l.cells[key]
		if c == nil {
			c = &cell{}
			l.cells[key] = c
		}
		c.shared = r.Count
	}
	return nil
}
