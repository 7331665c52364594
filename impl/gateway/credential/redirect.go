package credential

import (
	"errors"
	"net/http"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// ErrRedirectElsewhere refuses a redirect to another origin than the one
// the request was sent to: following it would carry the credential (an
// x-api-key header, a bearer token, a refresh token in the body of a 307)
// to a host it was not given for.
var ErrRedirectElsewhere = errors.New("redirect to another origin refused: it would carry the upstream credential there")

// maxRedirects bounds the redirects followed within one origin, as
// net/http's default policy does.
const maxRedirects = 10

// CheckRedirect is the redirect policy of every client that sends an
// upstream credential (background jobs and the OAuth calls): a redirect is
// followed only within the origin of the first request. net/http's own
// policy drops Authorization on a redirect to another host but keeps
// x-api-key and re-sends a 307's body, so it is not enough.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return errors.New("stopped after 10 redirects")
	}
	if store.Origin(req.URL.String()) != store.Origin(via[0].URL.String()) {
		return ErrRedirectElsewhere
	}
	return nil
}

// Client returns a client like c (a new one with timeout when c is nil)
// whose redirect policy is CheckRedirect. c itself is not changed.
func Client(c *http.Client, timeout time.Duration) *http.Client {
	if c == nil {
		return &http.Client{Timeout: timeout, CheckRedirect: CheckRedirect}
	}
	cp := *c
	cp.CheckRedirect = CheckRedirect
	return &cp
}
