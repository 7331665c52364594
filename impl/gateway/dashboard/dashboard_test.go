package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, path string) *http.Response {
	t.Helper()
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w.Result()
}

// The shell is static: HTML, CSS and one script module, served with a CSP
// that allows nothing from elsewhere, no inline script and no framing.
func TestServesTheShell(t *testing.T) {
	res := get(t, "/dashboard/")
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(body), `<script type="module" src="app.js">`) {
		t.Fatalf("index: %d %s", res.StatusCode, body)
	}
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(string(body), "<script>") {
		t.Error("inline script in the shell")
	}
	for path, ctype := range map[string]string{"/dashboard/app.js": "javascript", "/dashboard/app.css": "text/css"} {
		r := get(t, path)
		if r.StatusCode != 200 || !strings.Contains(r.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %s", path, r.StatusCode, r.Header.Get("Content-Type"))
		}
	}
	if r := get(t, "/dashboard"); r.StatusCode != http.StatusMovedPermanently {
		t.Errorf("/dashboard: %d", r.StatusCode)
	}
	if r := get(t, "/dashboard/nope.js"); r.StatusCode != 404 {
		t.Errorf("missing asset: %d", r.StatusCode)
	}
}

// The script never writes HTML from data and keeps the token only in the
// tab's sessionStorage (never localStorage or a cookie, which outlive the tab
// or travel with requests).
func TestScriptHygiene(t *testing.T) {
	b, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "localStorage", "document.cookie", "eval("} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
	if strings.Count(js, "sessionStorage.setItem(") != 1 {
		t.Error("app.js writes sessionStorage other than the token")
	}
}
