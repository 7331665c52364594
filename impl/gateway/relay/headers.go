package relay

import (
	"net/http"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// clientKey reads the principal key the way Anthropic clients send one:
// x-api-key, or Authorization: Bearer.
func clientKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// copyRequestHeaders forwards the client's headers (anthropic-version,
// anthropic-beta, content-type, user-agent …) minus its credentials,
// hop-by-hop headers and those its Connection header names (RFC 9110
// 7.6.1), the client-address headers (the provider gets no view of the
// proxy's clients or network; the proxy adds none of its own) and
// Accept-Encoding: the upstream answers uncompressed so usage can be read
// from the response.
func copyRequestHeaders(dst, src http.Header) {
	conn := src["Connection"]
	for k, vs := range src {
		switch k {
		case "X-Api-Key", "Authorization", "Host", "Content-Length", "Accept-Encoding", "Cookie",
			"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-Ip", "Via":
			continue
		}
		if hopHeader(k) || connectionNames(conn, k) {
			continue
		}
		dst[k] = vs
	}
}

// copyResponseHeaders passes the upstream's response headers on, minus the
// hop-by-hop ones and those its Connection header names, and minus the
// anthropic-ratelimit-* ones when dropRateLimits: an OAuth upstream's
// describe the subscription account the proxy shares among its principals,
// and a principal with default_limits gets its own instead (mixing the two
// would tell an SDK about limits that are not the client's). Otherwise an
// API-key upstream's are passed on (the operator's organisation limits,
// which the SDKs use for backoff).
func copyResponseHeaders(dst, src http.Header, dropRateLimits bool) {
	conn := src["Connection"]
	for k, vs := range src {
		if hopHeader(k) || connectionNames(conn, k) {
			continue
		}
		if dropRateLimits && len(k) > len(rateLimitPrefix) && strings.EqualFold(k[:len(rateLimitPrefix)], rateLimitPrefix) {
			continue
		}
		dst[k] = vs
	}
}

const rateLimitPrefix = "Anthropic-Ratelimit-"

// connectionNames reports whether the Connection header values name the
// header k (comma-separated, case-insensitive), without allocating.
func connectionNames(conn []string, k string) bool {
	for _, v := range conn {
		for v != "" {
			tok, rest, _ := strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
			v = rest
		}
	}
	return false
}

// setCredential puts the upstream's credential on an outbound request (the
// header by credential kind is the credential package's).
func setCredential(h http.Header, up *snapshot.Upstream) {
	credential.Set(h, up.CredentialKind, up.Credential)
}

func hopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}
