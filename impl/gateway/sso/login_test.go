package sso

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"golang.org/x/oauth2"
)

// /auth/login is served without authentication: however many sign-ins
// anonymous callers begin, the pending ones stay bounded, and the newest
// (a person's own, begun last) is still completable.
func TestPendingSignInsAreBounded(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Unix(1_800_000_000, 0))
	s := &SSO{Base: service.Base{Clock: clk}, logins: map[string]login{}, sessions: map[[32]byte]*session{},
		oauth: oauth2.Config{ClientID: "c", Endpoint: oauth2.Endpoint{AuthURL: "https://idp.example/authorize"}, RedirectURL: "https://admin.example/auth/callback"}}
	h := s.Handler()
	begin := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/auth/login", nil))
		if rec.Code != http.StatusFound {
			t.Fatalf("status %d", rec.Code)
		}
		for _, c := range rec.Result().Cookies() {
			if c.Name == loginCookie {
				return c.Value
			}
		}
		t.Fatal("no login cookie")
		return ""
	}
	for i := 0; i < 3*maxPendingLogins; i++ {
		begin()
	}
	if len(s.logins) > maxPendingLogins || len(s.loginOrder) > maxPendingLogins {
		t.Fatalf("%d pending sign-ins held (%d in order), bound %d", len(s.logins), len(s.loginOrder), maxPendingLogins)
	}
	last := begin()
	if _, ok := s.logins[last]; !ok {
		t.Fatal("the newest sign-in was dropped")
	}
	// Expired sign-ins leave as new ones begin.
	clk.Advance(loginLife + time.Second)
	begin()
	if len(s.logins) != 1 {
		t.Fatalf("%d pending sign-ins after all but one expired", len(s.logins))
	}
}
