// Package admin is the admin REST API under /admin/v1: upstreams,
// principals, keys, plugin chains, status and export (docs/admin-api.md,
// openapi.json). Every route requires a Bearer token; every mutation takes
// If-Match for optimistic concurrency; every refusal is one *APIError
// rendered in one place.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/service"
)

// Sealer encrypts credentials at rest.
type Sealer interface {
	Seal(plaintext, associatedData []byte) ([]byte, error)
}

// Runtime is the snapshot holder: Refresh rebuilds and swaps the snapshot.
type Runtime interface {
	Refresh(ctx context.Context) error
	Info() SnapshotInfo
}

// SnapshotInfo describes the snapshot in force.
type SnapshotInfo struct {
	Generation int64
	BuiltAt    time.Time
	Upstreams  int
	Principals int
	Keys       int
}

// PriceCatalog is the locally installed price catalog.
type PriceCatalog interface {
	// Installed returns the version, when it was installed and the catalog
	// document; ok is false before the first installation.
	Installed() (version string, at time.Time, body json.RawMessage, ok bool)
}

// Destinations decides whether the proxy may connect to a location
// (package egress). The error's text is shown to the caller: it must not
// repeat the location.
type Destinations interface {
	CheckURL(ctx context.Context, raw string) error
}

// Deps are what the admin API needs.
type Deps struct {
	Store   store.Store
	Sealer  Sealer
	Runtime Runtime
	// Opener opens captured exchanges (the master key's box).
	Opener Opener
	// Auth are the providers of admin.auth.providers (the break-glass
	// token) and of OIDC; a request passes when any of them, or a scoped
	// token in Store, accepts it.
	Auth []Authenticator
	// Registerer takes the API's own metrics (optional).
	Registerer prometheus.Registerer
	// Logger (nil: discards) and Clock (nil: the real clock) are defaulted
	// by service.Options.
	Logger *slog.Logger
	Clock  clock.Clock
	// Getenv reads the server's environment (api_key_env).
	Getenv func(string) string
	// KeyEnvAllow are the variables api_key_env may name besides those
	// starting with PROXY_UPSTREAM_KEY_ (--upstream-key-env-allow).
	KeyEnvAllow []string
	// ReservedEnv are variables api_key_env may never name even when
	// allowed: the ones the proxy's configuration reads (admin token
	// providers). PROXY_* other than the upstream key prefix is always
	// reserved.
	ReservedEnv []string
	// HostCloudCredentials lets bedrock and vertex upstreams use the proxy
	// host's own cloud credentials (--allow-host-cloud-credentials).
	HostCloudCredentials bool
	// Destinations polices the locations the proxy will connect to
	// (base_url, oauth_token_url); nil checks only their syntax.
	Destinations Destinations
	Version      string
	// ReplicaID names this replica in status.
	ReplicaID string
	// Tracing is shown in status (docs/tracing.md).
	Tracing   TracingStatus
	StartedAt time.Time
	// PriceCatalog reports this replica's installed price catalog (optional).
	PriceCatalog PriceCatalog
	// Plugins compiles uploaded WASM modules; nil answers
	// plugins_not_configured on upload.
	Plugins PluginCompiler
	// OAuth runs the OAuth flow, warm-up and limit-reset claims of
	// vendor_oauth upstreams; nil answers oauth_not_configured.
	OAuth OAuth
	// Dashboard serves the web dashboard's static shell under /dashboard/.
	// It holds no data (every call it makes goes through the admin API
	// with the operator's token), so it is served without authentication.
	Dashboard http.Handler
	// SignIn serves the OIDC sign-in under /auth/ (login, callback,
	// session, logout) without authentication; nil when OIDC is off.
	SignIn http.Handler
	// Extra mounts more handlers behind the same authentication, by
	// http.ServeMux pattern ("/metrics", "/admin/scheduler/").
	Extra map[string]http.Handler
	// Routing reports the upstreams' live routing state on this replica
	// (status); nil shows none cooling down and none in flight.
	Routing Routing
	// Sessions counts the sessions bound to each upstream on this replica
	// (affinity.Table); nil shows none.
	Sessions Sessions
	// UpstreamQueues and PrincipalQueues report the requests in flight
	// under a max_in_flight and queued for one, per upstream and per
	// principal, on this replica (admission.Controller); nil shows none.
	UpstreamQueues, PrincipalQueues Queues
	// Lane, when set, bounds how many writes (other than those calling a
	// provider, see callsOut) run at once: a write holds it
	// from its start to its answer, except while it waits for the
	// snapshot refresh (Runtime.Refresh takes the lane itself, so that
	// writes and rebuilds together leave processors to the proxy path).
	Lane Lane
	// Alerts sends test deliveries and lists webhook deliveries; nil
	// answers alerts_not_configured to a test.
	Alerts Alerts
}

// Routing is the upstreams' live routing state (routing.Board).
type Routing interface {
	Read(upstreamID string, now time.Time) routing.Snapshot
}

// Sessions counts sessions per upstream (affinity.Table).
type Sessions interface {
	Bound(now time.Time) map[string]int
}

// Queues reports one key's slots in use and requests waiting
// (admission.Controller.State).
type Queues interface {
	State(key string) (inFlight, queued int)
}

// Lane is a counting semaphore shared with the runtime's refreshes.
type Lane interface {
	Acquire(ctx context.Context) error
	Release()
}

// laneHeld marks a request context whose handler holds the lane.
type laneHeld struct{}

// callsOut reports the writes that wait on a provider (the OAuth token
// exchange and revocation, a limit-reset claim): they do not take the
// lane, so a slow provider cannot hold up every other write.
func callsOut(pattern string) bool {
	return strings.Contains(pattern, "/oauth/") || strings.HasSuffix(pattern, "/limit-resets/claim")
}

type api struct {
	Deps
	mux     *http.ServeMux
	authn   []Authenticator
	metrics *auditMetrics
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// New returns the admin handler.
func New(d Deps) http.Handler {
	o := service.Options{Logger: d.Logger, Clock: d.Clock}.WithDefaults()
	d.Logger, d.Clock = o.Logger, o.Clock
	if d.Getenv == nil {
		d.Getenv = func(string) string { return "" }
	}
	a := &api{Deps: d, mux: http.NewServeMux(), metrics: newAuditMetrics(d.Registerer)}
	a.authn = append(a.authn, d.Auth...)
	if d.Store != nil {
		a.authn = append(a.authn, scopedTokens{st: d.Store, clock: d.Clock})
	}
	for _, rt := range append(a.routes(), a.identityRoutes()...) {
		h := rt.h
		need := permOf(rt.method + " " + rt.pattern)
		mutates := rt.method != http.MethodGet && rt.method != http.MethodHead
		write := mutates && !callsOut(rt.pattern)
		if mutates {
			h = a.audited(h)
		}
		a.mux.HandleFunc(rt.method+" "+rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			tracing.Route(r.Context(), rt.method, rt.pattern)
			if id, _ := IdentityFrom(r.Context()); !id.Role.may(need) {
				render(w, r, a.Logger, forbidden(id, r))
				return
			}
			if write && a.Lane != nil {
				if err := a.Lane.Acquire(r.Context()); err != nil {
					return // the client left while waiting; nothing was done
				}
				defer a.Lane.Release()
				r = r.WithContext(context.WithValue(r.Context(), laneHeld{}, true))
			}
			if err := h(w, r); err != nil {
				render(w, r, a.Logger, err)
			}
		})
	}
	for pattern, h := range d.Extra {
		read := permOf(pattern)
		a.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Their permission is for reading; anything else they may
			// serve one day is for admins until the table says otherwise.
			need := read
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				need = permIdentity
			}
			if id, _ := IdentityFrom(r.Context()); !id.Role.may(need) {
				render(w, r, a.Logger, forbidden(id, r))
				return
			}
			h.ServeHTTP(w, r)
		}))
	}
	return a
}

// ServeHTTP authenticates before anything else, then routes; requests the
// mux cannot route get the API's own 404 and 405 bodies.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Responses carry credentials (an issued key) and revisions; no cache
	// may keep them.
	w.Header().Set("Cache-Control", "no-store")
	if a.Dashboard != nil && (r.URL.Path == "/dashboard" || strings.HasPrefix(r.URL.Path, "/dashboard/")) &&
		(r.Method == http.MethodGet || r.Method == http.MethodHead) {
		a.Dashboard.ServeHTTP(w, r)
		return
	}
	if a.SignIn != nil && strings.HasPrefix(r.URL.Path, "/auth/") {
		a.SignIn.ServeHTTP(w, r)
		return
	}
	// dashboard: a browser opening the admin root without a token lands on
	// the dashboard's sign-in instead of a 401 body.
	if a.Dashboard != nil && r.URL.Path == "/" && r.Header.Get("Authorization") == "" &&
		(r.Method == http.MethodGet || r.Method == http.MethodHead) {
		http.Redirect(w, r, "/dashboard/", http.StatusSeeOther)
		return
	}
	id, ok := a.authenticate(r)
	if !ok {
		render(w, r, a.Logger, newErr("unauthorized", "missing or invalid admin token: send Authorization: Bearer <token>"))
		return
	}
	ctx := context.WithValue(r.Context(), identityKey{}, id)
	ctx = store.WithActorInfo(ctx, store.Actor{Kind: id.Kind, Subject: id.Subject, Issuer: id.Issuer, TokenName: id.TokenName, Remote: r.RemoteAddr})
	r = r.WithContext(ctx)
	// mux.Handler only looks the route up; mux.ServeHTTP below also sets
	// the path values the handlers read.
	if _, pattern := a.mux.Handler(r); pattern == "" {
		if allowed := a.allowedMethods(r); len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			render(w, r, a.Logger, newErr("method_not_allowed", "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
			return
		}
		render(w, r, a.Logger, newErr("not_found", "no such endpoint: %s", r.URL.Path))
		return
	}
	a.mux.ServeHTTP(w, r)
}

// authenticate returns the identity of the first provider that accepts
// the request.
func (a *api) authenticate(r *http.Request) (Identity, bool) {
	for _, p := range a.authn {
		if id, ok := p.Authenticate(r); ok {
			return id, true
		}
	}
	return Identity{}, false
}

func (a *api) allowedMethods(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, p := a.mux.Handler(probe); p != "" {
			out = append(out, m)
		}
	}
	return out
}

// hasBody reports whether the request carries a body (a known non-zero
// length, or chunked).
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// readBody enforces the media type and size rules and returns the body.
func readBody(r *http.Request) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return nil, newErr("unsupported_media_type", "send the body as application/json (got Content-Type %q)", r.Header.Get("Content-Type"))
	}
	if r.ContentLength > maxBody {
		return nil, newErr("request_too_large", "the body exceeds %d bytes", maxBody)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, invalid("cannot read the body: %v", err)
	}
	if len(body) > maxBody {
		return nil, newErr("request_too_large", "the body exceeds %d bytes", maxBody)
	}
	return body, nil
}

// decode reads a required JSON body strictly into v: unknown fields and
// trailing data are refused, and the message names the offending field.
func decode(r *http.Request, v any) error {
	if !hasBody(r) {
		return invalid("a JSON body is required")
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeStrict(body, v, "")
}

// decodeOptional decodes a body when one was sent.
func decodeOptional(r *http.Request, v any) error {
	if !hasBody(r) {
		return nil
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeStrict(body, v, "")
}

// decodeStrict decodes one JSON value into v; path prefixes field names in
// messages ("cache_keepalive.").
func decodeStrict(body []byte, v any, path string) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid("a JSON body is required")
	}
	if err := checkJSONText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("%s", jsonProblem(err, path))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("the body holds more than one JSON value")
	}
	return nil
}

// jsonProblem describes a decoding error, naming the field path.
func jsonProblem(err error, path string) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := strings.TrimSuffix(path+te.Field, ".")
		if field == "" {
			return fmt.Sprintf("the body must be %s, got JSON %s", jsonType(te.Type.String()), te.Value)
		}
		return fmt.Sprintf("%s: expected %s, got JSON %s", field, jsonType(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return "malformed JSON: the body ends early"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fmt.Sprintf("%s%s: unknown field", path, name)
	}
	return err.Error()
}

// jsonType names a Go type the way a JSON client thinks of it.
func jsonType(goType string) string {
	switch {
	case goType == "string" || goType == "*string":
		return "a string"
	case goType == "bool" || goType == "*bool":
		return "a boolean"
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.HasPrefix(goType, "[]") || strings.HasPrefix(goType, "*[]"):
		return "an array"
	}
	return "an object"
}

// ifMatch reads the expected revision: "7", 7, W/"7" or * (any revision).
// Absent means AnyRevision unless required.
func ifMatch(r *http.Request, required bool) (int64, error) {
	raw := r.Header.Get("If-Match")
	v := strings.TrimSpace(raw)
	if v == "" {
		if required {
			return 0, newErr("precondition_required", "this operation needs If-Match with the revision from the resource's ETag")
		}
		return store.AnyRevision, nil
	}
	if v == "*" {
		return store.AnyRevision, nil
	}
	v = strings.TrimPrefix(v, "W/")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || strings.HasPrefix(v, "+") {
		return 0, invalid("If-Match: must be a revision such as \"3\" (or *), got %q", raw)
	}
	return n, nil
}

func etag(w http.ResponseWriter, rev int64) {
	w.Header().Set("ETag", `"`+strconv.FormatInt(rev, 10)+`"`)
}

// changed runs after a committed change: the snapshot is rebuilt before the
// response, so the caller's next proxy request sees the change. A failed
// rebuild does not fail the request: the change is committed, and the
// reconciler applies it at its next poll. The rebuild outlives a client
// that hangs up, since the change is already in the database.
func (a *api) changed(ctx context.Context) {
	if a.Runtime == nil {
		return
	}
	// The refresh takes the lane on its own; holding it here would keep
	// other writes from committing meanwhile, and so from sharing the
	// rebuild.
	if held, _ := ctx.Value(laneHeld{}).(bool); held {
		a.Lane.Release()
		defer func() { _ = a.Lane.Acquire(context.WithoutCancel(ctx)) }() // cannot fail: no deadline
	}
	if err := a.Runtime.Refresh(context.WithoutCancel(ctx)); err != nil {
		a.Logger.WarnContext(ctx, "snapshot refresh after an admin change failed; the reconciler will apply the change", "error", err)
	}
}

func unix(t time.Time) int64 { return t.Unix() }

func unixp(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	v := t.Unix()
	return &v
}
