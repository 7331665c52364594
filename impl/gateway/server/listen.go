package server

import (
	"crypto/subtle"
	"io"
	"log"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// newHTTPServer applies the listener bounds to one listener's server.
func newHTTPServer(h http.Handler, l ListenerLimits, errLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           boundBody(h, l.BodyReadTimeout),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
}

// boundBody gives a request d, from the end of its headers, to deliver its
// body. A client that trickles or withholds the body is cut when d passes,
// whether or not the handler reads the body (after the handler returns the
// server discards an unread body under the same deadline). When the body
// ends, net/http clears the deadline for its background read of the
// connection, so a response streaming for longer is not cut
// (TestBodyBoundDoesNotCutStreams holds it to that).
func boundBody(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d > 0 && r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d)) // a network deadline: the wall clock
		}
		h.ServeHTTP(w, r)
	})
}

// lifecycle is the replica's readiness as load balancers see it: ready
// until SIGTERM, then draining (503) while in-flight requests finish.
type lifecycle struct{ draining atomic.Bool }

// ServeHTTP answers /readyz (503 while draining) and /livez. Neither needs
// a credential and neither reveals anything beyond the state.
func (l *lifecycle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == "/readyz" && l.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "draining\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// adminFront routes the admin listener: the probes, /metrics for the
// scrape token, and everything else to the admin API (which also accepts
// the admin token on /metrics).
func adminFront(api, metrics http.Handler, life *lifecycle, metricsToken string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz", "/livez":
			life.ServeHTTP(w, r)
			return
		case "/metrics":
			if metricsToken != "" && r.Method == http.MethodGet && bearerIs(r, metricsToken) {
				metrics.ServeHTTP(w, r)
				return
			}
		}
		api.ServeHTTP(w, r)
	})
}

// bearerIs reports whether r carries token as its Bearer credential,
// compared in constant time.
func bearerIs(r *http.Request, token string) bool {
	a := r.Header.Get("Authorization")
	if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(a[7:])), []byte(token)) == 1
}
