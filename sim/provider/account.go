package provider

import (
	"net/http"
	"strconv"
	"time"
)

// rateWindow is the span the rate-limit headers describe.
const rateWindow = time.Minute

// account is the provider-side state of one credential's owner. It holds
// the rate-limit window now; usage windows, coupons and prompt caches are
// per account too and belong here.
type account struct {
	id string
	// windowStart opens with the first request after the previous window
	// ended, like the provider's own usage windows; zero means none is open.
	windowStart      time.Time
	requests, tokens int
}

// charge counts one request of n tokens at now and returns the window's
// totals after it and the window's end.
func (a *account) charge(now time.Time, n int) (requests, tokens int, reset time.Time) {
	if a.windowStart.IsZero() || now.Before(a.windowStart) || !now.Before(a.windowStart.Add(rateWindow)) {
		a.windowStart, a.requests, a.tokens = now, 0, 0
	}
	a.requests++
	a.tokens += n
	return a.requests, a.tokens, a.windowStart.Add(rateWindow)
}

// accountLocked returns the account's state, creating it on first use. Only
// authenticated callers get here, so the map is bounded by the credentials.
func (p *Provider) accountLocked(id string) *account {
	a := p.accounts[id]
	if a == nil {
		a = &account{id: id}
		p.accounts[id] = a
	}
	return a
}

// chargeRequest counts a served request against the account and sets the
// rate-limit headers it produces. The values follow only from the sim's
// clock and the requests before, so they are deterministic.
func (p *Provider) chargeRequest(w http.ResponseWriter, id string, tokens int) {
	p.mu.Lock()
	now := p.clock.now()
	requests, used, reset := p.accountLocked(id).charge(now, tokens)
	p.mu.Unlock()
	at := reset.UTC().Format(time.RFC3339)
	h := w.Header()
	h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(p.opts.RequestsPerMinute))
	h.Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(max(p.opts.RequestsPerMinute-requests, 0)))
	h.Set("anthropic-ratelimit-requests-reset", at)
	h.Set("anthropic-ratelimit-tokens-limit", strconv.Itoa(p.opts.TokensPerMinute))
	h.Set("anthropic-ratelimit-tokens-remaining", strconv.Itoa(max(p.opts.TokensPerMinute-used, 0)))
	h.Set("anthropic-ratelimit-tokens-reset", at)
}

// overLimit answers 429 when the account has used its requests of the
// current window (EnforceRequestsPerMinute); the refused request is not
// counted, like the API's.
func (p *Provider) overLimit(w http.ResponseWriter, id string) bool {
	p.mu.Lock()
	now := p.clock.now()
	a := p.accountLocked(id)
	open := !a.windowStart.IsZero() && !now.Before(a.windowStart) && now.Before(a.windowStart.Add(rateWindow))
	over := open && a.requests >= p.opts.RequestsPerMinute
	reset := a.windowStart.Add(rateWindow)
	p.mu.Unlock()
	if !over {
		return false
	}
	h := w.Header()
	h.Set("retry-after", strconv.Itoa(int((reset.Sub(now)+time.Second-1)/time.Second)))
	h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(p.opts.RequestsPerMinute))
	h.Set("anthropic-ratelimit-requests-remaining", "0")
	h.Set("anthropic-ratelimit-requests-reset", reset.UTC().Format(time.RFC3339))
	apiError(w, http.StatusTooManyRequests, "rate_limit_error", "Number of requests has exceeded your per-minute rate limit.")
	return true
}
