package relay

import (
	"context"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// TokenRefresher refreshes an OAuth upstream's access token now (the lazy
// refresh path): the OAuth service implements it, storing the new token so
// the next snapshot carries it. It bounds its own run time.
type TokenRefresher interface {
	RefreshToken(ctx context.Context, upstreamID string) error
}

// refreshCooldown is how long after a lazy refresh of an upstream ended
// another one is not started for it: a token the provider keeps refusing
// must not turn every request into a call to the token endpoint.
const refreshCooldown = 30 * time.Second

// refresher starts lazy refreshes off the request path, at most one at a
// time per upstream.
type refresher struct {
	r   TokenRefresher
	now func() time.Time
	// run starts f; tests run it synchronously.
	run func(f func())
	mu  sync.Mutex
	// busy holds upstreams with a refresh running; ended, when the last
	// one of an upstream ended.
	busy  map[string]bool
	ended map[string]time.Time
	onErr func(upstreamID string, err error)
}

// expired reports whether up's OAuth access token is past its expiry.
func expired(up *snapshot.Upstream, now time.Time) bool {
	return up.CredentialKind == credential.OAuth && !up.CredentialExpiresAt.IsZero() && !now.Before(up.CredentialExpiresAt)
}

// trigger starts a refresh of the upstream unless one is running or ended
// within the cooldown; it reports whether it started one.
func (f *refresher) trigger(upstreamID string) bool {
	if f == nil || f.r == nil {
		return false
	}
	f.mu.Lock()
	if f.busy[upstreamID] {
		f.mu.Unlock()
		return false
	}
	if t, ok := f.ended[upstreamID]; ok && f.now().Sub(t) < refreshCooldown {
		f.mu.Unlock()
		return false
	}
	f.busy[upstreamID] = true
	f.mu.Unlock()
	f.run(func() {
		// Detached from the request: the client does not wait for it,
		// and its going away must not abort the refresh.
		err := f.r.RefreshToken(context.Background(), upstreamID)
		f.mu.Lock()
		delete(f.busy, upstreamID)
		f.ended[upstreamID] = f.now()
		f.mu.Unlock()
		if err != nil && f.onErr != nil {
			f.onErr(upstreamID, err)
		}
	})
	return true
}
