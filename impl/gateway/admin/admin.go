// Package admin is the admin REST API under /admin/v1: upstreams,
// principals, keys, plugin chains, status and export. Every route requires
// a Bearer token; every mutation takes If-Match for optimistic concurrency;
// every refusal is one *APIError rendered in one place.
package admin

import (
	"context"
	"crypto/subtle"
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

	"github.com/pillarhq/pillar/impl/gateway/store"
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

// Authenticator verifies a request's credentials.
type Authenticator interface {
	Authenticate(r *http.Request) (subject string, ok bool)
}

// StaticToken accepts one Bearer token, compared in constant time.
type StaticToken struct{ Token string }

// Authenticate implements Authenticator.
func (s StaticToken) Authenticate(r *http.Request) (string, bool) {
	a := r.Header.Get("Authorization")
	if s.Token == "" || len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return "", false
	}
	got := strings.TrimSpace(a[7:])
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.Token)) != 1 {
		return "", false
	}
	return "static-token", true
}

// Deps are what the admin API needs.
type Deps struct {
	Store   store.Store
	Sealer  Sealer
	Runtime Runtime
	Auth    []Authenticator
	Logger  *slog.Logger
	Now     func() time.Time
	Getenv  func(string) string
	Version string
	// ReplicaID names this replica in status.
	ReplicaID string
	StartedAt time.Time
	// PriceCatalog reports this replica's installed price catalog (optional).
	PriceCatalog PriceCatalog
	// Extra mounts more handlers behind the same authentication, by path
	// prefix ("/metrics", "/admin/scheduler/").
	Extra map[string]http.Handler
}

type api struct {
	Deps
	mux *http.ServeMux
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// New returns the admin handler.
func New(d Deps) http.Handler {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Getenv == nil {
		d.Getenv = func(string) string { return "" }
	}
	a := &api{Deps: d, mux: http.NewServeMux()}
	for _, rt := range a.routes() {
		h := rt.h
		a.mux.HandleFunc(rt.method+" "+rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				render(w, r, a.Logger, err)
			}
		})
	}
	a.mux.HandleFunc("GET /admin/v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPIDocument(a.routes()))
	})
	for prefix, h := range d.Extra {
		a.mux.Handle(prefix, h)
	}
	return a
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ok := false
	for _, p := range a.Auth {
		if _, ok = p.Authenticate(r); ok {
			break
		}
	}
	if !ok {
		render(w, r, a.Logger, apiErr(http.StatusUnauthorized, "unauthorized", "missing or invalid admin token: send Authorization: Bearer <token>"))
		return
	}
	// mux.Handler only looks the route up; mux.ServeHTTP below also sets
	// the path values the handlers read.
	if _, pattern := a.mux.Handler(r); pattern == "" {
		// The mux found no route: tell 404 from 405 in the API's own shape.
		if allowed := a.allowedMethods(r.URL.Path); len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			render(w, r, a.Logger, apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		render(w, r, a.Logger, apiErr(http.StatusNotFound, "not_found", "no such endpoint: %s", r.URL.Path))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	a.mux.ServeHTTP(w, r)
}

func (a *api) allowedMethods(path string) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe, _ := http.NewRequest(m, path, nil)
		if _, p := a.mux.Handler(probe); p != "" {
			out = append(out, m)
		}
	}
	return out
}

// decode reads a JSON body strictly into v.
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		// curl -d sends application/x-www-form-urlencoded by default; the
		// body must still be JSON, so accepting the label costs nothing.
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json") && mt != "application/x-www-form-urlencoded") {
			return apiErr(http.StatusUnsupportedMediaType, "unsupported_media_type", "send the body as application/json")
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return invalid("cannot read the body: %v", err)
	}
	if len(body) > maxBody {
		return apiErr(http.StatusRequestEntityTooLarge, "request_too_large", "the body exceeds %d bytes", maxBody)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return invalid("a JSON body is required")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("%s", jsonProblem(err))
	}
	if dec.More() {
		return invalid("the body holds more than one JSON value")
	}
	return nil
}

// decodeOptional decodes a body when one was sent.
func decodeOptional(r *http.Request, v any) error {
	if r.ContentLength == 0 && r.Header.Get("Transfer-Encoding") == "" {
		return nil
	}
	return decode(r, v)
}

// jsonProblem names the field path of a decoding error.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fmt.Sprintf("%s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return err.Error()
}

// ifMatch reads the expected revision. Absent means AnyRevision unless
// required.
func ifMatch(r *http.Request, required bool) (int64, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		if required {
			return 0, apiErr(http.StatusPreconditionRequired, "precondition_required", "this operation needs If-Match with the revision from the resource's ETag")
		}
		return store.AnyRevision, nil
	}
	if v == "*" {
		return store.AnyRevision, nil
	}
	v = strings.TrimPrefix(v, "W/")
	v = strings.Trim(v, `"`)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, invalid("If-Match must be a revision such as \"3\", got %q", r.Header.Get("If-Match"))
	}
	return n, nil
}

func etag(w http.ResponseWriter, rev int64) {
	w.Header().Set("ETag", `"`+strconv.FormatInt(rev, 10)+`"`)
}

// changed runs after a committed change: the snapshot is rebuilt before the
// response, so the caller's next proxy request sees the change. A failed
// rebuild does not fail the request: the change is committed and the
// reconciler applies it at its next poll.
func (a *api) changed(ctx context.Context) {
	if a.Runtime == nil {
		return
	}
	if err := a.Runtime.Refresh(ctx); err != nil {
		a.Logger.Warn("snapshot refresh after admin change failed; the reconciler will retry", "error", err)
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
