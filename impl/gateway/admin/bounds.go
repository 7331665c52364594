package admin

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/jsonesc"
)

// Bounds of stored free text (docs/operations.md, "Input bounds").
// Everything an operator stores is read back by every replica's snapshot
// and shown in the dashboard, so none of it may grow without limit.
const (
	// maxModelID bounds a model id in allowed_models.
	maxModelID = 256
	// maxLocation bounds base_url and the OAuth endpoint URLs.
	maxLocation = 2048
	// maxAPIKeyValue bounds a literal credential.
	maxAPIKeyValue = 8192
	// maxPluginConfig bounds a plugin chain entry's config object.
	maxPluginConfig = 64 << 10
)

// checkJSONText refuses a body that is not valid UTF-8 or that escapes a
// lone UTF-16 surrogate (\ud800): encoding/json would silently store
// U+FFFD in their place, so what was stored would not be what was sent.
func checkJSONText(body []byte) error {
	if !utf8.Valid(body) {
		return invalid("the body is not valid UTF-8")
	}
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(body) {
				return nil // the decoder reports the truncated string
			}
			if body[i+1] != 'u' {
				i++
				continue
			}
			r, ok := jsonesc.Hex4(body, i+2)
			if !ok {
				return nil // malformed escape: the decoder reports it
			}
			i += 5
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return invalid("the body holds a lone UTF-16 surrogate escape (\\u%04x); send valid Unicode text", r)
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), i+2 < len(body) && body[i+1] == '\\' && body[i+2] == 'u'
				if ok {
					lo, ok = jsonesc.Hex4(body, i+3)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return invalid("the body holds a lone UTF-16 surrogate escape (\\u%04x); send valid Unicode text", r)
				}
				i += 6
			}
		}
	}
	return nil
}

// validModelID checks one allowed_models entry: 1 to 256 bytes, no control
// characters, not blank.
func validModelID(m string) bool {
	return m != "" && len(m) <= maxModelID && strings.TrimSpace(m) != "" && utf8.ValidString(m) &&
		!strings.ContainsFunc(m, unicode.IsControl)
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// UpstreamKeyEnvPrefix is the prefix of environment variables api_key_env
// may always name (docs/operations.md, Security).
const UpstreamKeyEnvPrefix = "PROXY_UPSTREAM_KEY_"

// keyEnvAllowed decides whether api_key_env may name a variable: one with
// the documented prefix or one the operator listed, and never one of the
// proxy's own (PROXY_*, and the variables its configuration names).
func (a *api) keyEnvAllowed(name string) bool {
	for _, r := range a.ReservedEnv {
		if name == r {
			return false
		}
	}
	if strings.HasPrefix(name, UpstreamKeyEnvPrefix) && len(name) > len(UpstreamKeyEnvPrefix) {
		return true
	}
	if strings.HasPrefix(name, "PROXY_") {
		return false
	}
	for _, n := range a.KeyEnvAllow {
		if name == n {
			return true
		}
	}
	return false
}
