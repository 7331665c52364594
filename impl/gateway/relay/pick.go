package relay

import (
	"time"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// DefaultMaxAttempts is how many upstreams one request may be sent to
// (failover included) when Options.MaxAttempts is unset.
const DefaultMaxAttempts = 3

// MaxAttemptsCap bounds Options.MaxAttempts: the attempt list lives on the
// request's stack.
const MaxAttemptsCap = 16

// picker yields a request's candidates in the order they are tried. The
// built-in router's list is ordered by priority class (subscriptions,
// then API keys); with spread set, each class is tried from an upstream
// drawn by weight, then round the rest of its weighted upstreams in list
// order, then its standby upstreams (weight 0) in list order, before the
// next class. Without spread (a router plugin decided the order) the list
// is taken as it is.
type picker struct {
	cands  []*snapshot.Upstream
	spread bool
	g0, g1 int // the class being tried: cands[g0:g1]
	first  int // where in the class the weighted round began (-1: none weighted)
	k      int // steps taken in the class: the weighted round, then the standby pass
	randN  func(uint64) uint64
}

// next returns the next candidate, nil after the last.
func (p *picker) next() *snapshot.Upstream {
	for {
		n := p.g1 - p.g0
		if p.k >= 2*n {
			if p.g1 >= len(p.cands) {
				return nil
			}
			p.g0, p.k = p.g1, 0
			p.g1 = p.g0 + 1
			if p.spread {
				kind := p.cands[p.g0].Kind
				for p.g1 < len(p.cands) && p.cands[p.g1].Kind == kind {
					p.g1++
				}
			}
			p.first = weightedPick(p.cands[p.g0:p.g1], p.randN)
			continue
		}
		k := p.k
		p.k++
		if k < n {
			if p.first < 0 {
				p.k = n // nothing weighted: straight to the standby pass
				continue
			}
			if u := p.cands[p.g0+(p.first+k)%n]; u.Weight > 0 {
				return u
			}
			continue
		}
		if u := p.cands[p.g0+k-n]; u.Weight <= 0 {
			return u
		}
	}
}

// weightedPick draws a position of ups with probability proportional to
// its weight; -1 when none has a weight (all standby).
func weightedPick(ups []*snapshot.Upstream, randN func(uint64) uint64) int {
	var total uint64
	for _, u := range ups {
		total += uint64(max(u.Weight, 0))
	}
	if total == 0 {
		return -1
	}
	if len(ups) == 1 {
		return 0
	}
	r := randN(total)
	for i, u := range ups {
		w := uint64(max(u.Weight, 0))
		if r < w {
			return i
		}
		r -= w
	}
	return len(ups) - 1
}

// attemptList is the upstreams a request will be sent to, in order: at
// most the attempt budget, none that is cooling down. soonest is the
// earliest end of the cooldowns skipped (zero when none was).
type attemptList struct {
	buf     [MaxAttemptsCap]*snapshot.Upstream
	n       int
	soonest time.Time
}

func (l *attemptList) ups() []*snapshot.Upstream { return l.buf[:l.n] }

// plan fills l from the candidates. An upstream out of routing (its
// credential revoked) takes no place in the budget; it is planned alone
// only when nothing else is, so the answer says why.
func (h *Handler) plan(l *attemptList, cands []*snapshot.Upstream, spread bool, now time.Time) {
	p := picker{cands: cands, spread: spread, randN: h.randN}
	var unroutable *snapshot.Upstream
	passed := 0 // unroutable upstreams passed over, counted as failovers
	for l.n < h.maxAttempts {
		up := p.next()
		if up == nil {
			break
		}
		if !up.Routable() {
			if unroutable == nil {
				unroutable = up
			}
			passed++
			continue
		}
		if until, cooling := h.board.CoolingUntil(up.ID, now); cooling {
			if l.soonest.IsZero() || until.Before(l.soonest) {
				l.soonest = until
			}
			continue
		}
		l.buf[l.n] = up
		l.n++
	}
	if l.n == 0 && l.soonest.IsZero() && unroutable != nil {
		l.buf[0], l.n = unroutable, 1
		return
	}
	if l.n > 0 {
		for range passed {
			h.failover()
		}
	}
}
