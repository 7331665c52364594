// Package dashboard is the web dashboard served by the proxy binary on the
// admin listener under /dashboard/. It is a static shell (HTML, CSS and a
// plain JavaScript module embedded in the binary, nothing fetched at run
// time): the operator signs in with the admin token, which the page keeps
// in the tab's sessionStorage only, and every read and change goes through
// the admin API with that token, its ETags and its error codes
// (docs/dashboard.md).
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard. It holds no data and needs no token.
func Handler() http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The page runs only its own script, talks only to this origin,
		// and may not be framed.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		p := strings.TrimPrefix(r.URL.Path, "/dashboard")
		if p == "" {
			http.Redirect(w, r, "/dashboard/", http.StatusMovedPermanently)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = p
		files.ServeHTTP(w, r2)
	})
}
