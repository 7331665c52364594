package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// AuditEntryResponse is one change in the audit trail.
type AuditEntryResponse struct {
	ID     string `json:"id"`
	AtUnix int64  `json:"at_unix_secs"`
	Actor  struct {
		Kind      string `json:"kind"`
		Subject   string `json:"subject"`
		Issuer    string `json:"issuer,omitempty"`
		TokenName string `json:"token_name,omitempty"`
		Remote    string `json:"remote,omitempty"`
	} `json:"actor"`
	Action       string          `json:"action"`
	ResourceKind string          `json:"resource_kind"`
	ResourceID   string          `json:"resource_id"`
	Revision     *int64          `json:"revision"`
	Before       json.RawMessage `json:"before"`
	After        json.RawMessage `json:"after"`
}

// AuditResponse is a page of the audit trail, newest first.
type AuditResponse struct {
	Entries    []AuditEntryResponse `json:"entries"`
	NextCursor *string              `json:"next_cursor"`
}

const maxAuditPage = 500

var auditParams = []string{"actor", "actor_kind", "action", "resource_kind", "resource_id", "since_unix_secs", "until_unix_secs", "limit", "cursor"}

func (a *api) audit(w http.ResponseWriter, r *http.Request) error {
	qs := r.URL.Query()
	for name := range qs {
		if !slices.Contains(auditParams, name) {
			return invalid("%s: unknown parameter (known: %s)", name, strings.Join(auditParams, ", "))
		}
	}
	q := store.AuditQuery{Actor: qs.Get("actor"), ActorKind: qs.Get("actor_kind"), Action: qs.Get("action"),
		ResourceKind: qs.Get("resource_kind"), ResourceID: qs.Get("resource_id"), Limit: 100}
	for name, dst := range map[string]*time.Time{"since_unix_secs": &q.Since, "until_unix_secs": &q.Until} {
		if v := qs.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return invalid("%s: must be a Unix time in seconds", name)
			}
			*dst = time.Unix(n, 0)
		}
	}
	if !q.Until.IsZero() && !q.Until.After(q.Since) {
		return invalid("until_unix_secs: must be after since_unix_secs")
	}
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditPage {
			return invalid("limit: must be 1 to %d", maxAuditPage)
		}
		q.Limit = n
	}
	if v := qs.Get("cursor"); v != "" {
		c, ok := parseAuditCursor(v)
		if !ok {
			return invalid("cursor: not a cursor from a previous page")
		}
		q.After = c
	}
	es, err := a.Store.QueryAudit(r.Context(), q)
	if err != nil {
		return fromStore(err, "audit entry", "")
	}
	out := AuditResponse{Entries: []AuditEntryResponse{}}
	for _, e := range es {
		var o AuditEntryResponse
		o.ID, o.AtUnix, o.Action, o.ResourceKind, o.ResourceID, o.Revision = e.ID, e.At.Unix(), e.Action, e.ResourceKind, e.ResourceID, e.Revision
		o.Actor.Kind, o.Actor.Subject, o.Actor.Issuer, o.Actor.TokenName, o.Actor.Remote = e.ActorKind, e.Actor, e.Issuer, e.TokenName, e.Remote
		o.Before, o.After = e.Before, e.After
		out.Entries = append(out.Entries, o)
	}
	if len(es) == q.Limit {
		last := es[len(es)-1]
		c := base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(last.At.UnixNano(), 10) + "|" + last.ID))
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func parseAuditCursor(v string) (*store.AuditCursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, false
	}
	at, id, ok := strings.Cut(string(raw), "|")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, false
	}
	return &store.AuditCursor{At: time.Unix(0, n), ID: id}, true
}

// auditMetrics counts committed admin changes by the kind of actor.
type auditMetrics struct{ changes *prometheus.CounterVec }

func newAuditMetrics(reg prometheus.Registerer) *auditMetrics {
	m := &auditMetrics{changes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_admin_changes_total",
		Help: "Changes committed through the admin API, by the kind of credential that made them (break_glass, token, oidc).",
	}, []string{"actor_kind"})}
	for _, k := range []string{KindBreakGlass, KindToken, KindOIDC} {
		m.changes.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.changes)
	}
	return m
}

// resourceDoc is the representation of the resource a write addresses,
// read through the API's own GET route for it, with secrets removed: the
// audit trail's before and after. The resource is the longest prefix of
// the path that a GET route answers for a single item ("…/{id}").
func (a *api) resourceDoc(r *http.Request) json.RawMessage {
	path := r.URL.Path
	for strings.Count(path, "/") > 3 {
		probe := &http.Request{Method: http.MethodGet, URL: r.URL.JoinPath("/"), Header: http.Header{}}
		probe.URL.Path, probe.URL.RawPath, probe.URL.RawQuery = path, "", ""
		probe = probe.WithContext(r.Context())
		if _, pattern := a.mux.Handler(probe); strings.HasSuffix(pattern, "}") {
			rec := httptest.NewRecorder()
			a.mux.ServeHTTP(rec, probe)
			if rec.Code != http.StatusOK {
				return nil
			}
			return redact(rec.Body.Bytes())
		}
		path = path[:strings.LastIndex(path, "/")]
	}
	return nil
}

// secretFields are the names under which a representation could carry a
// secret; the audit trail stores "[redacted]" instead of their values.
var secretFields = []string{"key", "token", "api_key_value", "access_token", "refresh_token", "id_token",
	"client_secret", "secret", "password", "code", "code_verifier", "authorization_code", "credential"}

// redact removes secrets from a JSON document; anything not JSON is not
// kept at all.
func redact(doc []byte) json.RawMessage {
	var v any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil
	}
	var walk func(any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				if _, str := x.(string); str && isSecretField(k) {
					t[k] = "[redacted]"
				} else {
					t[k] = walk(x)
				}
			}
		case []any:
			for i := range t {
				t[i] = walk(t[i])
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return nil
	}
	return out
}

func isSecretField(k string) bool {
	k = strings.ToLower(k)
	for _, s := range secretFields {
		if k == s || strings.HasSuffix(k, "_"+s) {
			return true
		}
	}
	return false
}

// audited runs a write so that the audit rows it commits name the
// resource before and after it (secrets removed) and are counted by the
// kind of actor. The rows themselves are written by the store in the
// change's transaction; the documents follow right after the commit.
func (a *api) audited(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var note store.AuditNote
		r = r.WithContext(store.WithAuditNote(r.Context(), &note))
		before := a.resourceDoc(r)
		cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
		if err := h(cw, r); err != nil {
			render(cw, r, a.Logger, err)
		}
		ids := note.IDs()
		if len(ids) == 0 || cw.status >= 300 {
			return nil
		}
		id, _ := IdentityFrom(r.Context())
		a.metrics.changes.WithLabelValues(id.Kind).Add(float64(len(ids)))
		var after json.RawMessage
		if cw.status == http.StatusCreated {
			before, after = nil, redact(cw.body.Bytes())
		} else if r.Method != http.MethodDelete || !strings.HasSuffix(r.Pattern, "}") {
			after = a.resourceDoc(r)
		}
		if err := a.Store.AnnotateAudit(context.WithoutCancel(r.Context()), ids, before, after); err != nil {
			a.Logger.WarnContext(r.Context(), "attaching before/after to the audit trail failed; the change and its audit row stand", "error", err)
		}
		return nil
	}
}

// captureWriter keeps the status and the first bytes of an answer.
type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

const maxAuditDoc = 64 << 10

func (c *captureWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if room := maxAuditDoc - c.body.Len(); room > 0 {
		c.body.Write(b[:min(len(b), room)])
	}
	return c.ResponseWriter.Write(b)
}
