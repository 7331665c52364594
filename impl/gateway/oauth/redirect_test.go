package oauth

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Every call of the provider client (token exchange and refresh, profile,
// usage, coupon claims) follows no redirect to another origin: a token
// endpoint answering 307 elsewhere would otherwise receive the refresh
// token again in the re-sent body, and an account endpoint the bearer.
func TestClientFollowsNoRedirectElsewhere(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		leaked = append(leaked, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization")+" body="+string(b))
		mu.Unlock()
	}))
	defer other.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer home.Close()
	ctx := context.Background()
	for name, c := range map[string]*Client{"given client": {HTTP: &http.Client{}}, "default client": {}} {
		calls := map[string]func() error{
			"exchange": func() error {
				_, err := c.Exchange(ctx, home.URL+"/v1/oauth/token", "code-secret", "verifier-secret", "https://cb.example", "st")
				return err
			},
			"refresh": func() error { _, err := c.Refresh(ctx, home.URL+"/v1/oauth/token", "rt-secret"); return err },
			"profile": func() error { _, err := c.Profile(ctx, home.URL, "at-secret"); return err },
			"usage":   func() error { _, err := c.Usage(ctx, home.URL, "at-secret"); return err },
			"claim":   func() error { return c.ClaimReset(ctx, home.URL, "at-secret", "coupon") },
		}
		for call, fn := range calls {
			if err := fn(); err == nil {
				t.Errorf("%s %s: a redirect to another origin was answered as success", name, call)
			} else if strings.Contains(err.Error(), "secret") {
				t.Errorf("%s %s: error names a secret: %v", name, call, err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Fatalf("%d provider call(s) followed the redirect to another origin: %q", len(leaked), leaked)
	}
}
