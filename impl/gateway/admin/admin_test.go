package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/lockedbuf"
)

const token = "test-admin-token"

// now is the clock every test server runs on.
var now = time.Unix(1763800000, 0)

// env is one admin API on a fresh SQLite database.
type env struct {
	t      *testing.T
	srv    *httptest.Server
	st     store.Store
	dbPath string
	rt     *snapshot.Runtime
	box    *secret.Box
	logs   *lockedbuf.Buffer
	// getenvCalls counts reads of the server environment.
	getenvMu    sync.Mutex
	getenvCalls map[string]int
	oauth       *fakeOAuth
}

type options struct {
	// wrap replaces the store the API sees (failure injection).
	wrap func(store.Store) store.Store
	// runtime replaces the snapshot runtime adapter.
	runtime admin.Runtime
	auth    []admin.Authenticator
	catalog admin.PriceCatalog
	// noOAuth runs the API without the OAuth services and plugin runtime.
	noOAuth bool
	// dashboard is served under /dashboard/ without a token.
	dashboard http.Handler
	// destinations is the destination policy (default none).
	destinations admin.Destinations
	// lane bounds concurrent writes (default none).
	lane admin.Lane
	// routing is the live routing state status and overview show.
	routing admin.Routing
	// sessions counts the sessions per upstream status and overview show.
	sessions admin.Sessions
	// upstreamQueues and principalQueues report slots in use and queued.
	upstreamQueues, principalQueues admin.Queues
	// clock is the API's clock (default now); the store keeps now.
	clock *fakeclock.Clock
	// reg takes the API's metrics.
	reg prometheus.Registerer
	// hostCloud allows host_credentials (--allow-host-cloud-credentials).
	hostCloud bool
	// alerts sends and lists webhook deliveries (default none).
	alerts admin.Alerts
}

// runtimeAdapter exposes snapshot.Runtime as admin.Runtime, as the server does.
type runtimeAdapter struct{ rt *snapshot.Runtime }

func (r runtimeAdapter) Refresh(ctx context.Context) error { return r.rt.Refresh(ctx) }
func (r runtimeAdapter) Info() admin.SnapshotInfo {
	s := r.rt.Current()
	u, p, k := s.Counts()
	return admin.SnapshotInfo{Generation: s.Generation, BuiltAt: s.BuiltAt, Upstreams: u, Principals: p, Keys: k}
}

// serverEnv is the environment api_key_env reads from.
var serverEnv = map[string]string{"ANTHROPIC_KEY": "sk-ant-from-env-0123456789", "OTHER_KEY": "sk-ant-other-9876543210",
	"PROXY_MASTER_KEY": "master-key-never-sent", "PROXY_ADMIN_TOKEN": "admin-token-never-sent", "MY_ADMIN_TOKEN": "provider-token-never-sent",
	"HOME": "/root", "PROXY_UPSTREAM_KEY_SIM": "sk-ant-prefixed-1111"}

func setup(t *testing.T, opts ...func(*options)) *env {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	dbPath := filepath.Join(t.TempDir(), "proxy.db")
	st, err := sqlite.Open(context.Background(), dbPath, sqlite.Options{Clock: fakeclock.New(now)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	box, err := secret.New(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	rt := snapshot.NewRuntime(st, box, service.Options{Clock: fakeclock.New(now)})
	e := &env{t: t, st: st, dbPath: dbPath, rt: rt, box: box, logs: &lockedbuf.Buffer{}, getenvCalls: map[string]int{}}
	var apiStore store.Store = st
	if o.wrap != nil {
		apiStore = o.wrap(st)
	}
	var oa admin.OAuth
	var pc admin.PluginCompiler
	if !o.noOAuth {
		e.oauth = &fakeOAuth{st: apiStore, claimErr: map[string]error{}}
		oa = e.oauth
		pc = fakeCompiler{}
	}
	var runtime admin.Runtime = runtimeAdapter{rt}
	if o.runtime != nil {
		runtime = o.runtime
	}
	auth := []admin.Authenticator{admin.StaticToken{Token: token}}
	if o.auth != nil {
		auth = o.auth
	}
	clock := fakeclock.New(now)
	if o.clock != nil {
		clock = o.clock
	}
	h := admin.New(admin.Deps{
		Store: apiStore, Sealer: box, Opener: box, Runtime: runtime, Auth: auth, Registerer: o.reg,
		Logger: slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Clock:  clock,
		Getenv: func(k string) string {
			e.getenvMu.Lock()
			defer e.getenvMu.Unlock()
			e.getenvCalls[k]++
			return serverEnv[k]
		},
		Version: "test-version", ReplicaID: "replica-1", StartedAt: time.Unix(1763700000, 0),
		PriceCatalog: o.catalog,
		OAuth:        oa,
		Plugins:      pc,
		Dashboard:    o.dashboard,
		// The test environment's variables are allowed by name, as an
		// operator's --upstream-key-env-allow would.
		KeyEnvAllow:          []string{"ANTHROPIC_KEY", "OTHER_KEY", "UNSET"},
		ReservedEnv:          []string{"MY_ADMIN_TOKEN"},
		Destinations:         o.destinations,
		HostCloudCredentials: o.hostCloud,
		Lane:                 o.lane,
		Routing:              o.routing,
		Alerts:               o.alerts,
		Sessions:             o.sessions,
		UpstreamQueues:       o.upstreamQueues,
		PrincipalQueues:      o.principalQueues,
		Extra: map[string]http.Handler{
			"/metrics":          http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "m 1\n") }),
			"/admin/scheduler/": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"recurring_jobs":[]}`) }),
		},
	})
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

func (r resp) list(t *testing.T) []any {
	t.Helper()
	var l []any
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return l
}

// do sends an authenticated request. body may be nil, a string (sent as
// is) or a value to encode; hdr holds header name/value pairs, where an
// empty value removes the header. Every answer is checked against
// openapi.json: the status must be documented for the operation, a success
// body must match its schema and an error code must be one the operation
// lists.
func (e *env) do(method, path string, body any, hdr ...string) resp {
	e.t.Helper()
	r := send(e.t, e.srv.URL, method, path, body, hdr...)
	checkAgainstOpenAPI(e.t, method, path, r)
	return r
}

func send(t *testing.T, base, method, path string, body any, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, b}
}

// wantErr checks the admin error shape, status and code.
func wantErr(t *testing.T, r resp, status int, code string) {
	t.Helper()
	var b struct {
		Error struct {
			Code, Message string
			Details       any
		}
	}
	if r.status != status || json.Unmarshal(r.body, &b) != nil || b.Error.Code != code || b.Error.Message == "" {
		t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q", ct)
	}
}

// js is the JSON encoding of v, for comparing decoded values.
func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// wantMessage checks an error message mentions every part.
func wantMessage(t *testing.T, r resp, parts ...string) {
	t.Helper()
	var b struct{ Error struct{ Message string } }
	json.Unmarshal(r.body, &b)
	for _, p := range parts {
		if !strings.Contains(b.Error.Message, p) {
			t.Fatalf("message %q does not mention %q", b.Error.Message, p)
		}
	}
}

func (e *env) upstream(name string) map[string]any {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": name, "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_value": "sk-ant-value-" + name})
	if r.status != 201 {
		e.t.Fatalf("create upstream: %d %s", r.status, r.body)
	}
	return r.json(e.t)
}

func (e *env) oauthUpstream(name string) map[string]any {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": name, "kind": "vendor_oauth", "base_url": "https://api.example"})
	if r.status != 201 {
		e.t.Fatalf("create upstream: %d %s", r.status, r.body)
	}
	return r.json(e.t)
}

func (e *env) principal(name string) map[string]any {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": name, "kind": "machine", "allowed_models": []string{"claude-*"}})
	if r.status != 201 {
		e.t.Fatalf("create principal: %d %s", r.status, r.body)
	}
	return r.json(e.t)
}

func (e *env) key(principalID string) map[string]any {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/principals/"+principalID+"/keys", map[string]any{"name": "k"})
	if r.status != 201 {
		e.t.Fatalf("issue key: %d %s", r.status, r.body)
	}
	return r.json(e.t)
}

// state is everything a request could change: the configuration
// generation and the full export (timestamps come from the fixed clock).
func (e *env) state() string {
	e.t.Helper()
	gen, err := e.st.ConfigGeneration(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	ex := send(e.t, e.srv.URL, "GET", "/admin/v1/export", nil)
	if ex.status != 200 {
		e.t.Fatalf("export: %d %s", ex.status, ex.body)
	}
	return fmt.Sprintf("generation %d\n%s", gen, ex.body)
}

// unchanged fails when fn changed anything.
func (e *env) unchanged(what string, fn func()) {
	e.t.Helper()
	before := e.state()
	fn()
	if after := e.state(); after != before {
		e.t.Fatalf("%s changed the configuration:\nbefore %s\nafter  %s", what, before, after)
	}
}

// dbBytes is everything SQLite wrote to disk for this test.
func (e *env) dbBytes() []byte {
	e.t.Helper()
	var all []byte
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(e.dbPath + suffix)
		if err != nil && !os.IsNotExist(err) {
			e.t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// ------------------------------------------------- OpenAPI conformance

var (
	oaOnce sync.Once
	oaDoc  map[string]any
	oaMux  *http.ServeMux
)

func openAPI(t *testing.T) map[string]any {
	t.Helper()
	oaOnce.Do(func() {
		b, err := os.ReadFile("openapi.json")
		if err != nil {
			panic(err)
		}
		if err := json.Unmarshal(b, &oaDoc); err != nil {
			panic(err)
		}
		// A mux of the documented operations finds the operation a
		// request addresses, the same way the server routes it.
		oaMux = http.NewServeMux()
		for p, ops := range oaDoc["paths"].(map[string]any) {
			for m := range ops.(map[string]any) {
				oaMux.HandleFunc(strings.ToUpper(m)+" "+p, func(http.ResponseWriter, *http.Request) {})
			}
		}
	})
	return oaDoc
}

// operation returns the documented operation a request addresses, or nil.
func operation(t *testing.T, method, path string) map[string]any {
	t.Helper()
	doc := openAPI(t)
	req := httptest.NewRequest(method, path, nil)
	_, pattern := oaMux.Handler(req)
	if pattern == "" {
		return nil
	}
	m, p, _ := strings.Cut(pattern, " ")
	return doc["paths"].(map[string]any)[p].(map[string]any)[strings.ToLower(m)].(map[string]any)
}

func checkAgainstOpenAPI(t *testing.T, method, path string, r resp) {
	t.Helper()
	if r.status == http.StatusUnauthorized {
		return // checked for every route by TestAuthOnEveryRoute
	}
	op := operation(t, method, path)
	if op == nil {
		return // not an API operation: 404/405 bodies, Extra routes
	}
	doc := openAPI(t)
	responses := op["responses"].(map[string]any)
	entry, ok := responses[fmt.Sprint(r.status)].(map[string]any)
	if !ok {
		t.Fatalf("%s %s answered %d, which openapi.json does not document for %s: %s", method, path, r.status, op["operationId"], r.body)
	}
	if method == http.MethodHead {
		if len(r.body) != 0 {
			t.Fatalf("HEAD %s returned a body", path)
		}
		return
	}
	if r.status >= 400 {
		var b struct{ Error struct{ Code string } }
		json.Unmarshal(r.body, &b)
		listed := false
		for _, c := range op["x-error-codes"].([]any) {
			listed = listed || c == b.Error.Code
		}
		ref, _ := entry["$ref"].(string)
		desc, _ := entry["description"].(string)
		if !listed || !(strings.HasSuffix(ref, "/"+b.Error.Code) || strings.Contains(desc, b.Error.Code)) {
			t.Fatalf("%s %s: error code %q with status %d is not documented for %s", method, path, b.Error.Code, r.status, op["operationId"])
		}
		validate(t, doc, map[string]any{"$ref": "#/components/schemas/Error"}, r.body, method+" "+path)
		return
	}
	content, _ := entry["content"].(map[string]any)
	if content == nil {
		if len(r.body) != 0 {
			t.Fatalf("%s %s: undocumented body %s", method, path, r.body)
		}
		return
	}
	if mt, _, _ := strings.Cut(r.header.Get("Content-Type"), ";"); mt != "application/json" {
		// Another documented media type (text/csv) is checked by its test.
		if _, ok := content[mt]; !ok {
			t.Fatalf("%s %s: undocumented content type %q", method, path, mt)
		}
		return
	}
	schema := content["application/json"].(map[string]any)["schema"].(map[string]any)
	validate(t, doc, schema, r.body, method+" "+path)
}

func validate(t *testing.T, doc map[string]any, schema map[string]any, body []byte, where string) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: body is not JSON: %v: %s", where, err, body)
	}
	if err := conforms(doc, schema, v, "$"); err != nil {
		t.Fatalf("%s: body does not match openapi.json: %v\n%s", where, err, body)
	}
}

// conforms checks v against the subset of JSON Schema openapi.json uses.
func conforms(doc, s map[string]any, v any, at string) error {
	if ref, ok := s["$ref"].(string); ok {
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		return conforms(doc, cur.(map[string]any), v, at)
	}
	if one, ok := s["oneOf"].([]any); ok {
		n := 0
		var last error
		for _, sub := range one {
			if err := conforms(doc, sub.(map[string]any), v, at); err == nil {
				n++
			} else {
				last = err
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: matches %d of oneOf (%v)", at, n, last)
		}
	}
	if typ, ok := s["type"]; ok {
		types := []any{typ}
		if l, ok := typ.([]any); ok {
			types = l
		}
		match := false
		for _, ty := range types {
			match = match || jsonKind(v, ty.(string))
		}
		if !match {
			return fmt.Errorf("%s: %v is not of type %v", at, v, typ)
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range enum {
			found = found || x == v
		}
		if !found {
			return fmt.Errorf("%s: %v is not one of %v", at, v, enum)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for _, req := range asList(s["required"]) {
			if _, ok := x[req.(string)]; !ok {
				return fmt.Errorf("%s: required property %s missing", at, req)
			}
		}
		for k, val := range x {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if s["additionalProperties"] == false {
					return fmt.Errorf("%s.%s: undocumented property", at, k)
				}
				continue
			}
			if err := conforms(doc, ps, val, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, it := range x {
				if err := conforms(doc, items, it, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	case string:
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			return fmt.Errorf("%s: %q does not match %s", at, x, p)
		}
	case float64:
		if m, ok := s["minimum"].(float64); ok && x < m {
			return fmt.Errorf("%s: %v below minimum %v", at, x, m)
		}
		if m, ok := s["maximum"].(float64); ok && x > m {
			return fmt.Errorf("%s: %v above maximum %v", at, x, m)
		}
	}
	return nil
}

func asList(v any) []any { l, _ := v.([]any); return l }

func jsonKind(v any, typ string) bool {
	switch typ {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case "number":
		_, ok := v.(float64)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}
