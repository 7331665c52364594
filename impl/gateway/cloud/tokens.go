package cloud

import (
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/pillarhq/pillar/impl/clock"
)

// refreshRetry is how long a token that could not be refreshed ahead of
// its expiry is used before the refresh is tried again: a token endpoint
// that is down must not hold every request for its timeout.
const refreshRetry = 30 * time.Second

// aheadTokens keeps one access token and replaces it tokenEarly before it
// expires, judged by the injected clock: oauth2's own cache judges by the
// wall clock, which no test can move.
//
// A refresh that fails while the token is still valid keeps the token
// (until refreshRetry has passed, then the refresh is tried again); only
// once it has expired does a failed refresh fail the request. Callers wait
// for a refresh in flight rather than starting their own, so concurrent
// requests fetch once.
type aheadTokens struct {
	src   oauth2.TokenSource
	clock clock.Clock
	// wall is the clock the library stamps expiries by.
	wall func() time.Time
	// refreshed counts each fetch by its result (nil: not counted).
	refreshed func(ok bool)

	mu  sync.Mutex
	tok *oauth2.Token
	// expiry is tok's expiry on clock; zero for a token without one.
	expiry  time.Time
	retryAt time.Time
}

var _ oauth2.TokenSource = (*aheadTokens)(nil)

func (a *aheadTokens) Token() (*oauth2.Token, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	if a.tok != nil && (a.expiry.IsZero() || now.Before(a.expiry.Add(-tokenEarly))) {
		return a.tok, nil
	}
	live := a.tok != nil && now.Before(a.expiry)
	if live && now.Before(a.retryAt) {
		return a.tok, nil
	}
	t, err := fetch(a.src)
	if a.refreshed != nil {
		a.refreshed(err == nil)
	}
	if err != nil {
		if live {
			a.retryAt = now.Add(refreshRetry)
			return a.tok, nil
		}
		return nil, err
	}
	a.tok, a.expiry, a.retryAt = t, time.Time{}, time.Time{}
	if !t.Expiry.IsZero() {
		// The library stamped the expiry by the wall clock at the fetch;
		// the lifetime it granted is carried onto ours.
		a.expiry = now.Add(t.Expiry.Sub(a.wall()))
	}
	return t, nil
}

// fetch is a new token from src, past any cache in front of it: a source
// the library wrapped in its own reuse cache is unwrapped by
// ReuseTokenSource when given a token that is not valid.
func fetch(src oauth2.TokenSource) (*oauth2.Token, error) {
	return oauth2.ReuseTokenSource(&oauth2.Token{}, src).Token()
}
