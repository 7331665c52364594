package admin

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// RequestLogEvent is one request of the request log: the recorded event
// with the names its principal and upstream have now.
type RequestLogEvent struct {
	RequestEventResponse
	PrincipalName string `json:"principal_name"`
	UpstreamName  string `json:"upstream_name"`
	// Captured: the event has a captured exchange to open (GET
	// /admin/v1/request-events/{id}/exchange). Looked up per page rather
	// than recorded with the event, so the request path writes nothing
	// more and a dropped or pruned capture shows no marker.
	Captured bool `json:"captured"`
}

// RequestLogResponse is one page of GET /admin/v1/request-log.
type RequestLogResponse struct {
	Events []RequestLogEvent `json:"events"`
	// NextCursor continues the listing (older events); null on the last page.
	NextCursor *string `json:"next_cursor"`
}

// requestLogParams are the query parameters the request log accepts.
var requestLogParams = map[string]bool{"principal": true, "model": true, "status": true,
	"since_unix_secs": true, "until_unix_secs": true, "limit": true, "cursor": true}

// requestLog searches request events newest first, one page at a time.
// Paging is by keyset (the last event's time and id), so a page never
// repeats or skips events while new ones arrive.
func (a *api) requestLog(w http.ResponseWriter, r *http.Request) error {
	q, err := parseRequestLogQuery(r.URL.Query())
	if err != nil {
		return err
	}
	want := q.Limit
	q.Limit++ // one more tells whether another page exists
	evs, err := a.Store.SearchRequestEvents(r.Context(), q)
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	names, err := a.names(r)
	if err != nil {
		return err
	}
	out := RequestLogResponse{Events: []RequestLogEvent{}}
	if len(evs) > want {
		evs = evs[:want]
		last := evs[want-1]
		c := encodeCursor(store.EventPosition{At: last.At, ID: last.ID})
		out.NextCursor = &c
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	captured, err := a.Store.CapturedEventIDs(r.Context(), ids)
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	for _, e := range evs {
		out.Events = append(out.Events, RequestLogEvent{RequestEventResponse: requestEventResponse(e),
			PrincipalName: names.principal(e.PrincipalID), UpstreamName: names.upstream(e.UpstreamID), Captured: captured[e.ID]})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func parseRequestLogQuery(v url.Values) (store.EventQuery, error) {
	q := store.EventQuery{Limit: 50}
	for k := range v {
		if !requestLogParams[k] {
			return q, invalid("%s: unknown query parameter (accepted: principal, model, status, since_unix_secs, until_unix_secs, limit, cursor)", k)
		}
	}
	q.PrincipalID = strings.TrimSpace(v.Get("principal"))
	q.Model = strings.TrimSpace(v.Get("model"))
	if len(q.PrincipalID) > 200 || len(q.Model) > 200 {
		return q, invalid("principal and model: at most 200 characters")
	}
	if s := v.Get("status"); s != "" {
		lo, hi, ok := statusRange(s)
		if !ok {
			return q, invalid("status: must be a status code (429), a class (2xx to 5xx) or error (400 and above), got %q", s)
		}
		q.StatusMin, q.StatusMax = lo, hi
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since_unix_secs", &q.Since}, {"until_unix_secs", &q.Until}} {
		if s := v.Get(p.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 || n > 1<<40 {
				return q, invalid("%s: must be a unix time in seconds, got %q", p.name, s)
			}
			*p.dst = time.Unix(n, 0)
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return q, invalid("until_unix_secs: must be after since_unix_secs")
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			return q, invalid("limit: must be 1 to 500, got %q", s)
		}
		q.Limit = n
	}
	if s := v.Get("cursor"); s != "" {
		pos, ok := decodeCursor(s)
		if !ok {
			return q, invalid("cursor: not a cursor this endpoint returned (pass next_cursor as it is)")
		}
		q.After = &pos
	}
	return q, nil
}

// statusRange parses a status filter into an inclusive range.
func statusRange(s string) (int, int, bool) {
	switch s {
	case "error":
		return 400, 599, true
	case "1xx", "2xx", "3xx", "4xx", "5xx":
		c := int(s[0]-'0') * 100
		return c, c + 99, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 || strconv.Itoa(n) != s {
		return 0, 0, false
	}
	return n, n, true
}

// A cursor is the last event's time (unix microseconds) and id, base64url
// encoded: opaque to clients, cheap to check.
func encodeCursor(p store.EventPosition) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.At.UnixMicro(), 10) + "." + p.ID))
}

func decodeCursor(s string) (store.EventPosition, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 512 {
		return store.EventPosition{}, false
	}
	at, id, ok := strings.Cut(string(b), ".")
	us, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || us < 0 || id == "" {
		return store.EventPosition{}, false
	}
	return store.EventPosition{At: time.UnixMicro(us), ID: id}, true
}

func requestEventResponse(e store.RequestEvent) RequestEventResponse {
	r := RequestEventResponse{ID: e.ID, AtUnixSecs: e.At.Unix(), PrincipalID: e.PrincipalID, KeyID: e.KeyID,
		UpstreamID: e.UpstreamID, Model: e.Model, Stream: e.Stream, Status: e.Status, ErrorType: e.ErrorType,
		InputTokens: e.InputTokens, OutputTokens: e.OutputTokens, CacheCreationInputTokens: e.CacheCreationInputTokens,
		CacheReadInputTokens: e.CacheReadInputTokens, DurationMillis: e.DurationMillis, CacheCreation1hInputTokens: e.CacheCreation1hInputTokens,
		UpstreamModel: e.UpstreamModel}
	if e.CostNanos != nil {
		c, v := formatCost(*e.CostNanos), e.PriceVersion
		r.CostUSD, r.PriceVersion = &c, &v
	}
	if e.FirstByteMillis > 0 {
		ttfb := e.FirstByteMillis
		r.FirstByteMillis = &ttfb
	}
	if e.Dialect != "" {
		d := e.Dialect
		r.Dialect = &d
	}
	return r
}

// nameBook maps ids to the current names; an id whose resource is gone
// keeps its id as its name.
type nameBook struct{ principals, upstreams map[string]string }

func (n nameBook) principal(id string) string { return nameOr(n.principals[id], id) }
func (n nameBook) upstream(id string) string  { return nameOr(n.upstreams[id], id) }

func nameOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (a *api) names(r *http.Request) (nameBook, error) {
	n := nameBook{principals: map[string]string{}, upstreams: map[string]string{}}
	ps, err := a.Store.ListPrincipals(r.Context())
	if err != nil {
		return n, fromStore(err, resPrincipal, "")
	}
	for _, p := range ps {
		n.principals[p.ID] = p.Name
	}
	us, err := a.Store.ListUpstreams(r.Context())
	if err != nil {
		return n, fromStore(err, resUpstream, "")
	}
	for _, u := range us {
		n.upstreams[u.ID] = u.Name
	}
	return n, nil
}
