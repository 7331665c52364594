package relay

import (
	"strings"
	"testing"
)

func TestValidModelID(t *testing.T) {
	t.Parallel()
	for m, want := range map[string]bool{
		"claude-sonnet-4-5":        true,
		strings.Repeat("m", 256):   true,
		strings.Repeat("m", 257):   false,
		strings.Repeat("m", 5e6+7): false,
		"claude-\xff":              false,
	} {
		if got := validModelID(m); got != want {
			t.Errorf("validModelID(%.20q…) = %v", m, got)
		}
	}
}
