// Package credential owns how an upstream credential is kept and presented:
// its kinds as stored, the associated data it is sealed with, and the
// headers that carry it to the provider. Every caller that seals, opens or
// sends an upstream credential goes through here, so the provider's wire
// details live in one place.
package credential

import (
	"net/http"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Kinds of upstream credential, the values of store.Upstream.CredentialKind
// (empty: none). Untyped, so they compare with the string fields that hold
// them.
const (
	// APIKey is a provider API key, sent as x-api-key.
	APIKey = "api_key"
	// OAuth is an OAuth token bundle; its access token is sent as a bearer
	// token with OAuthBeta.
	OAuth = "oauth"
	// AWSKeys are a bedrock upstream's static AWS access keys (JSON,
	// cloud.StaticAWSCredentials); requests are signed with them (SigV4).
	AWSKeys = "aws_keys"
	// ServiceAccount is a vertex upstream's Google service account key
	// (JSON); tokens are obtained with it from its token_uri.
	ServiceAccount = "service_account"
	// Host: the cloud upstream uses the proxy host's own credentials (the
	// AWS default chain, Google's application default credentials); what
	// is sealed is only this marker.
	Host = "host"
)

// OAuthBeta is the beta flag the provider requires with OAuth bearer tokens.
const OAuthBeta = "oauth-2025-04-20"

// AD is the associated data an upstream's credential is sealed with: bound
// to the upstream's id, so a ciphertext copied to another row does not open,
// and to the origins the credential is sent to (store.CredentialOrigins:
// base_url, and an OAuth upstream's token endpoint), so a credential left
// behind by a change of either does not open for the new location.
func AD(upstreamID, kind, baseURL, oauthTokenURL string) []byte {
	return []byte("upstream-credential:" + upstreamID + "@" + strings.Join(store.CredentialOrigins(kind, baseURL, oauthTokenURL), " "))
}

// UpstreamAD is AD for the stored upstream u.
func UpstreamAD(u *store.Upstream) []byte {
	return AD(u.ID, u.Kind, u.BaseURL, u.OAuthTokenURL)
}

// LegacyAD is the associated data of credentials sealed before they were
// bound to origins. It is only tried to re-seal such a credential bound to
// the origins its row names (Rebind), never to send one.
func LegacyAD(upstreamID string) []byte {
	return []byte("upstream-credential:" + upstreamID)
}

// WebhookAD is the associated data an alert webhook's HMAC key is sealed
// with: bound to the webhook and to the origin of its URL, so that a key
// left behind by a change of URL to another origin does not open and is
// never used to sign for a receiver it was not given for.
func WebhookAD(webhookID, url string) []byte {
	return []byte("webhook-secret:" + webhookID + "@" + store.Origin(url))
}

// Set puts a credential of the given kind on an outbound request's headers:
// x-api-key, or for OAuth a bearer token with OAuthBeta added to whatever
// anthropic-beta flags the request already lists. It allocates only the
// header values it must build (it runs on every proxied request).
func Set(h http.Header, kind, secret string) {
	switch kind {
	case AWSKeys, ServiceAccount, Host:
		return // the cloud transports authenticate their own requests
	}
	if kind != OAuth {
		h.Set("X-Api-Key", secret)
		return
	}
	h.Set("Authorization", "Bearer "+secret)
	if b := h.Get("Anthropic-Beta"); !strings.Contains(b, OAuthBeta) {
		if b == "" {
			h.Set("Anthropic-Beta", OAuthBeta)
		} else {
			h.Set("Anthropic-Beta", b+","+OAuthBeta)
		}
	}
}
