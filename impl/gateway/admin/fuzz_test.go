package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecode drives the admin API's request decoding (decode, the strict
// JSON decoder every handler uses, and the validation behind it) with
// arbitrary bodies. Properties: it never panics, and a refusal always
// renders as the admin error shape with a registered code and that code's
// status. The seed corpus is testdata/fuzz/FuzzDecode.
//
//	go test -run='^$' -fuzz=FuzzDecode -fuzztime=10s ./impl/gateway/admin/
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"name":"u","kind":"vendor_api_key","base_url":"https://api.example","api_key_env":"PROXY_UPSTREAM_KEY_A"}`,
		`{"name":"p","kind":"machine","allowed_models":["claude-*"],"default_limits":[{"kind":"requests","window_secs":60,"max":5}]}`,
		`{"name":"p","kind":"user","cache_keepalive":{"enabled":true,"classifier":{"extra_wait_for_user_tools":["t"]}}}`,
		`{"name":"a\ud83d\ude00","kind":"machine"}`,
		`{"name":"a\ud800","kind":"machine"}`,
		"{\"name\":\"\xff\"}",
		`{"name":"x"} {}`,
		`[1,2`,
		`{"allowed_models":null}`,
		`{"name":"k","extra":1}`,
		``,
	} {
		f.Add([]byte(s))
	}
	a := &api{Deps: Deps{Logger: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" }}}
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(err error) {
			if err == nil {
				return
			}
			req := httptest.NewRequest(http.MethodPost, "/admin/v1/x", nil)
			w := httptest.NewRecorder()
			render(w, req, a.Logger, err)
			var out errorBody
			if jerr := json.Unmarshal(w.Body.Bytes(), &out); jerr != nil {
				t.Fatalf("refusal is not JSON: %q", w.Body.String())
			}
			status, ok := codeStatus[out.Error.Code]
			if !ok || status != w.Code || out.Error.Message == "" {
				t.Fatalf("refusal %d %q is not a registered code with its status", w.Code, w.Body.String())
			}
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("decoding returned a non-API error (rendered as 500 internal): %v", err)
			}
		}
		req := func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/admin/v1/x", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			return r
		}
		var up UpstreamCreateBody
		check(decode(req(), &up))
		var p CreatePrincipalBody
		if err := decode(req(), &p); err != nil {
			check(err)
		} else {
			_, err := a.principalFromBody(&p)
			check(err)
		}
		var pp PatchPrincipalBody
		check(decode(req(), &pp))
		var k IssueKeyBody
		check(decodeOptional(req(), &k))
		var ic InsertChainBody
		check(decode(req(), &ic))
		check(func() error { _, err := NormalizeCacheKeepalive(body); return err }())
	})
}
