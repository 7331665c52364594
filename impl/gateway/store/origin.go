package store

import (
	"errors"
	"net"
	"net/url"
	"strings"
)

// ErrCredentialRequired: the change would send the upstream's stored
// credential to another origin; the credential must be given again in the
// same change (or dropped first).
var ErrCredentialRequired = errors.New("credential required for a change of origin")

// Origin is where a request to a location goes: its scheme, host and port,
// lower-cased, with the scheme's default port made explicit. A location that
// does not parse, or names no host, is its own origin, compared as given.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		switch scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// CredentialOrigins are the origins an upstream's credential is sent to:
// its base_url's, and for vendor_oauth upstreams (whose refresh token goes
// to the token endpoint) and vertex upstreams (whose service account signs
// assertions for its token_uri, kept in oauth_token_url) the token
// endpoint's. An empty oauth_token_url
// stands for the built-in endpoint and is kept as the empty origin.
func CredentialOrigins(kind, baseURL, oauthTokenURL string) []string {
	o := []string{Origin(baseURL)}
	if kind == KindVendorOAuth || kind == KindVertex {
		t := ""
		if oauthTokenURL != "" {
			t = Origin(oauthTokenURL)
		}
		o = append(o, t)
	}
	return o
}
