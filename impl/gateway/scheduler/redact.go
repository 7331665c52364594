package scheduler

import (
	"regexp"
	"strings"
)

// Failure summaries are shown to operators. A handler's error text may quote
// a request, a header or a stored blob, so everything credential- or
// payload-shaped is masked before it is stored or shown.

var redactions = []struct {
	re   *regexp.Regexp
	repl string
}{
	// Header lines and header-like pairs: Authorization, x-api-key,
	// proxy/downstream keys, cookies.
	{regexp.MustCompile(`(?i)\b(authorization|proxy-authorization|x-api-key|api[_-]?key|cookie|set-cookie)(["']?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;}]+(\s+[^\s,;}]+)?)`), `$1$2[REDACTED]`},
	// Bearer tokens anywhere.
	{regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+`), `Bearer [REDACTED]`},
	// Provider and proxy keys, OAuth tokens by their prefixes.
	{regexp.MustCompile(`\b(sk-[A-Za-z0-9_-]{2,}|adm-[A-Za-z0-9_-]{8,})`), `[REDACTED_KEY]`},
	// JSON fields that carry secrets or prompt payloads.
	{regexp.MustCompile(`(?i)("(access_token|refresh_token|id_token|token|secret|password|api_key_value|credential|ciphertext|snapshot|prompt|system)"\s*:\s*)("(?:[^"\\]|\\.)*"|\{[^{}]*\}|\[[^\[\]]*\])`), `$1"[REDACTED]"`},
	{regexp.MustCompile(`(?i)("(messages|content)"\s*:\s*)(\[.*\]|"(?:[^"\\]|\\.)*")`), `$1"[REDACTED_PAYLOAD]"`},
	// Long base64/hex runs: ciphertext or encoded payloads.
	{regexp.MustCompile(`[A-Za-z0-9+/_-]{40,}={0,2}`), `[REDACTED_BLOB]`},
}

// maxSummary bounds a stored failure summary.
const maxSummary = 2000

// Redact masks credentials, ciphertext and payload-shaped material in an
// error message and bounds its length.
func Redact(s string) string {
	for _, r := range redactions {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	if len(s) > maxSummary {
		s = s[:maxSummary] + "…[truncated]"
	}
	return strings.ToValidUTF8(s, "�")
}
