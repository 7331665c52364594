package credential_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
)

// elsewhere is a server on another origin that counts the requests that
// reach it carrying a credential.
func elsewhere(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var leaked atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "" || r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
	}))
	t.Cleanup(s.Close)
	return s, &leaked
}

// A redirect to another origin is refused before anything is sent there;
// one within the origin is followed. The caller's client keeps its own
// policy (Client copies).
func TestClientFollowsRedirectsOnlyWithinTheOrigin(t *testing.T) {
	other, leaked := elsewhere(t)
	var home *httptest.Server
	home = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/stolen", http.StatusTemporaryRedirect)
		case "/near":
			http.Redirect(w, r, home.URL+"/landed", http.StatusTemporaryRedirect)
		case "/landed":
			w.Write([]byte("ok"))
		}
	}))
	defer home.Close()
	given := &http.Client{}
	c := credential.Client(given, 0)
	if given.CheckRedirect != nil {
		t.Fatal("Client changed the caller's client")
	}
	for _, c := range []*http.Client{c, credential.Client(nil, 0)} {
		req, _ := http.NewRequest(http.MethodPost, home.URL+"/away", strings.NewReader(`{"refresh_token":"rt"}`))
		req.Header.Set("X-Api-Key", "sk-secret")
		_, err := c.Do(req)
		if !errors.Is(err, credential.ErrRedirectElsewhere) {
			t.Fatalf("cross-origin redirect: err %v, want ErrRedirectElsewhere", err)
		}
		req, _ = http.NewRequest(http.MethodGet, home.URL+"/near", nil)
		req.Header.Set("X-Api-Key", "sk-secret")
		res, err := c.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("same-origin redirect: %v %v", res, err)
		}
		res.Body.Close()
	}
	if n := leaked.Load(); n != 0 {
		t.Fatalf("%d request(s) carried the credential to the other origin", n)
	}
}
