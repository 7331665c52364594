package routing

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Cooldown bounds.
const (
	// DefaultRateLimitCooldown is how long a 429 without a reset or
	// retry-after takes an upstream out of routing.
	DefaultRateLimitCooldown = 30 * time.Second
	// DefaultOverloadCooldown is the same for a 529 (overloaded): the
	// provider's overload passes sooner than an account's limit.
	DefaultOverloadCooldown = 5 * time.Second
	// MaxCooldown bounds what a provider's headers can ask for: past the
	// seven-day window a header is wrong, not a limit.
	MaxCooldown = 7*24*time.Hour + time.Hour
)

// resetHeaders are the reset headers of the provider's limits, canonical
// keys, in the order their -remaining header is checked.
var resetHeaders = [...]struct{ remaining, reset string }{
	{"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	{"Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{"Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
	// Subscription accounts report one unified limit (unix seconds).
	{"", "Anthropic-Ratelimit-Unified-Reset"},
}

// CooldownUntil is when an upstream that answered status with headers h at
// now can be tried again; ok is false for a status that is no rate limit
// (only 429 and 529 cool an upstream down). retry-after wins when given;
// otherwise the latest reset among the exhausted limits (remaining 0),
// else the default for the status.
func CooldownUntil(status int, h http.Header, now time.Time) (time.Time, bool) {
	var def time.Duration
	switch status {
	case http.StatusTooManyRequests:
		def = DefaultRateLimitCooldown
	case 529:
		def = DefaultOverloadCooldown
	default:
		return time.Time{}, false
	}
	until := now.Add(def)
	if v := headerValue(h, "Retry-After"); v != "" {
		if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
			return clamp(now, now.Add(time.Duration(secs*float64(time.Second)))), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return clamp(now, t), true
		}
	}
	var latest time.Time
	for _, r := range resetHeaders {
		if r.remaining != "" && headerValue(h, r.remaining) != "0" {
			continue
		}
		if t, ok := parseReset(headerValue(h, r.reset)); ok && t.After(latest) {
			latest = t
		}
	}
	if latest.After(now) {
		until = latest
	}
	return clamp(now, until), true
}

func clamp(now, t time.Time) time.Time {
	if t.Before(now) {
		return now
	}
	if t.Sub(now) > MaxCooldown {
		return now.Add(MaxCooldown)
	}
	return t
}

// parseReset reads a reset header: RFC 3339 (the API's limits) or unix
// seconds (the unified subscription limit).
func parseReset(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, true
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
		return time.Unix(n, 0), true
	}
	return time.Time{}, false
}

// headerValue is h.Get for a canonical key, without canonicalising again.
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}
