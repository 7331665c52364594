package relay

import (
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// TokenRefresher asks for a lazy refresh of an OAuth upstream's token (the
// OAuth service implements it): it returns at once, deciding itself
// whether a refresh starts (one at a time per upstream, a cooldown after
// one ended), and reports whether one did. The new token reaches the
// snapshot; the relay fails over meanwhile.
type TokenRefresher interface {
	RequestRefresh(upstreamID string) bool
}

// expired reports whether up's OAuth access token is past its expiry.
func expired(up *snapshot.Upstream, now time.Time) bool {
	return up.CredentialKind == credential.OAuth && !up.CredentialExpiresAt.IsZero() && !now.Before(up.CredentialExpiresAt)
}
