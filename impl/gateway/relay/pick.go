package relay

import (
	"bytes"
	"math"
	"net/http"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/routing"
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
// order, then its standby upstreams (weight 0, or past a usage threshold)
// in list order, before the next class. A request of a session tries the
// class's weighted upstreams in the session's rendezvous order instead,
// after the upstream the session was moved to, if any: every replica
// chooses alike, and a failover goes where the session's next request
// will. Without spread (a router plugin decided the order) the list is
// taken as it is.
type picker struct {
	cands  []*snapshot.Upstream
	spread bool
	g0, g1 int // the class being tried: cands[g0:g1]
	first  int // where in the class the weighted round began (-1: none weighted)
	k      int // steps taken in the class: the weighted round, then the standby pass
	randN  func(uint64) uint64
	board  *routing.Board
	now    time.Time

	session affinity.Key // zero: none
	movedTo string       // the upstream the session was moved to ("": none)
	moved   int          // its position in the class (-1: not in it, or taken)
	// last is the rendezvous rank of the session's previous pick in the
	// class: the next pick is the best below it.
	lastScore float64
	lastPos   int
}

// weight is u's weight for new work now: 0 (standby) past a usage
// threshold.
func (p *picker) weight(u *snapshot.Upstream) int {
	if u.Weight <= 0 || p.board.OverThreshold(u.ID, u.MaxUtilization5h, u.MaxUtilization7d, p.now) {
		return 0
	}
	return u.Weight
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
			p.enterClass()
			continue
		}
		k := p.k
		p.k++
		if k < n {
			if p.first < 0 {
				p.k = n // nothing weighted: straight to the standby pass
				continue
			}
			if !p.session.IsZero() {
				if u := p.sessionNext(); u != nil {
					return u
				}
				p.k = n
				continue
			}
			if u := p.cands[p.g0+(p.first+k)%n]; p.weight(u) > 0 {
				return u
			}
			continue
		}
		if u := p.cands[p.g0+k-n]; p.weight(u) <= 0 {
			return u
		}
	}
}

// enterClass prepares the weighted round of cands[g0:g1].
func (p *picker) enterClass() {
	ups := p.cands[p.g0:p.g1]
	if p.session.IsZero() {
		p.first = weightedPick(ups, p.weight, p.randN)
		return
	}
	p.first, p.moved = -1, -1
	p.lastScore, p.lastPos = math.Inf(1), -1
	for i, u := range ups {
		if p.weight(u) > 0 {
			p.first = 0
			if u.ID == p.movedTo {
				p.moved = i
			}
		}
	}
}

// sessionNext is the session's next weighted upstream of the class: the
// one it was moved to, then by rendezvous score, highest first (ties by
// position); nil when none is left.
func (p *picker) sessionNext() *snapshot.Upstream {
	ups := p.cands[p.g0:p.g1]
	if p.moved >= 0 {
		u := ups[p.moved]
		p.moved = -2 // taken: skipped below
		return u
	}
	best, bestScore := -1, math.Inf(-1)
	for i, u := range ups {
		if p.movedTo != "" && u.ID == p.movedTo {
			continue
		}
		w := p.weight(u)
		if w <= 0 {
			continue
		}
		sc := affinity.Score(p.session, u.ID, w)
		// Below the previous pick in (score, position) order…
		if sc > p.lastScore || sc == p.lastScore && i <= p.lastPos {
			continue
		}
		// …and the best of those.
		if best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	if best < 0 {
		return nil
	}
	p.lastScore, p.lastPos = bestScore, best
	return ups[best]
}

// natural is where session k goes in the class of landed with no move
// considered: the rendezvous choice by configured weight, past a usage
// threshold or not, so a session moved away by a threshold stays where it
// went when the usage falls. "" when the class has no weighted upstream.
func natural(k affinity.Key, cands []*snapshot.Upstream, landed *snapshot.Upstream) string {
	win, top := "", math.Inf(-1)
	for _, u := range cands {
		if u.Kind != landed.Kind || u.Weight <= 0 {
			continue
		}
		if sc := affinity.Score(k, u.ID, u.Weight); sc > top {
			win, top = u.ID, sc
		}
	}
	return win
}

// weightedPick draws a position of ups with probability proportional to
// its weight; -1 when none has a weight (all standby).
func weightedPick(ups []*snapshot.Upstream, weight func(*snapshot.Upstream) int, randN func(uint64) uint64) int {
	var total uint64
	for _, u := range ups {
		total += uint64(weight(u))
	}
	if total == 0 {
		return -1
	}
	if len(ups) == 1 {
		return 0
	}
	r := randN(total)
	for i, u := range ups {
		w := uint64(weight(u))
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
//
// A request of session (zero: none) starts where the session was moved
// to, else at its rendezvous choice; the caller records where it landed
// (h.land).
func (h *Handler) plan(l *attemptList, cands []*snapshot.Upstream, spread bool, session affinity.Key, now time.Time) {
	p := picker{cands: cands, spread: spread, randN: h.randN, board: h.board, now: now}
	if spread && !session.IsZero() {
		p.session = session
		p.movedTo, _ = h.affinity.Moved(session)
	}
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

// land records where a request of a session was served, so its next
// requests follow (affinity.Table.Land), and counts a move.
func (h *Handler) land(session affinity.Key, cands []*snapshot.Upstream, up *snapshot.Upstream) {
	if session.IsZero() || h.affinity == nil {
		return
	}
	if h.affinity.Land(session, up.ID, natural(session, cands, up), h.Clock.Now()) && h.metrics != nil {
		h.metrics.affinityMoves.Inc()
	}
}

// sessionOf is the session a request belongs to: Claude Code's session
// header, else, for a principal with cache keep-alive, the keep-alive
// session's prompt hash (only a prompt with a cache breakpoint has one);
// zero when neither names one.
func sessionOf(r *http.Request, p *snapshot.Principal, body []byte) affinity.Key {
	if id := header(r.Header, affinity.SessionHeader); id != "" {
		return affinity.HeaderKey(p.ID, id)
	}
	if p.KeepAliveEnabled && bytes.Contains(body, []byte(`"cache_control"`)) {
		return affinity.PromptKey(p.ID, body)
	}
	return affinity.Key{}
}

// served reports whether an answer of status means the upstream took the
// request: a rate limit or a server error is no place to keep a session.
func served(status int) bool {
	return status < 500 && status != http.StatusTooManyRequests
}
