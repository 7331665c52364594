package admin

import (
	"encoding/csv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// maxUsageRange bounds GET /admin/v1/usage's range (a year and a day).
const maxUsageRange = 366 * 24 * time.Hour

// UsageRow is one group of GET /admin/v1/usage: the grouped dimensions
// (the others are absent) and the group's totals.
type UsageRow struct {
	PrincipalID   *string `json:"principal_id,omitempty"`
	PrincipalName *string `json:"principal_name,omitempty"`
	KeyID         *string `json:"key_id,omitempty"`
	UpstreamID    *string `json:"upstream_id,omitempty"`
	UpstreamName  *string `json:"upstream_name,omitempty"`
	Model         *string `json:"model,omitempty"`
	UsageTotals
}

// UsageResponse is the JSON body of GET /admin/v1/usage.
type UsageResponse struct {
	FromUnixSecs     int64       `json:"from_unix_secs"`
	ToUnixSecs       int64       `json:"to_unix_secs"`
	LiveFromUnixSecs int64       `json:"live_from_unix_secs"`
	GroupBy          []string    `json:"group_by"`
	Rows             []UsageRow  `json:"rows"`
	Total            UsageTotals `json:"total"`
}

type usageParams struct {
	from, to time.Time
	groupBy  []string
	csv      bool
}

func parseUsageParams(r *http.Request, now time.Time) (usageParams, error) {
	q := r.URL.Query()
	// The default end is the next whole second, so every event recorded
	// so far is inside [from, to) at the one-second resolution of times.
	p := usageParams{to: now.Truncate(time.Second).Add(time.Second), groupBy: []string{}}
	for k, vs := range q {
		switch k {
		case "from", "to", "format":
			if len(vs) > 1 {
				return p, invalid("%s: given %d times", k, len(vs))
			}
		case "group_by":
		default:
			return p, invalid("%s: unknown query parameter (accepted: from, to, group_by, format)", k)
		}
	}
	unix := func(name string) (time.Time, bool, error) {
		v := q.Get(name)
		if v == "" {
			return time.Time{}, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 1<<40 {
			return time.Time{}, false, newErr("invalid_time_range", "%s: unix seconds, got %q", name, v)
		}
		return time.Unix(n, 0).UTC(), true, nil
	}
	to, set, err := unix("to")
	if err != nil {
		return p, err
	}
	if set {
		p.to = to
	}
	p.from = p.to.Truncate(24 * time.Hour)
	if !p.from.Before(p.to) {
		p.from = p.to.Add(-24 * time.Hour)
	}
	from, set, err := unix("from")
	if err != nil {
		return p, err
	}
	if set {
		p.from = from
	}
	if !p.from.Before(p.to) {
		return p, newErr("invalid_time_range", "from (%d) must be before to (%d)", p.from.Unix(), p.to.Unix())
	}
	if p.to.Sub(p.from) > maxUsageRange {
		return p, newErr("invalid_time_range", "the range is at most %d days", int(maxUsageRange/(24*time.Hour)))
	}
	for _, v := range q["group_by"] {
		for _, d := range strings.Split(v, ",") {
			d = strings.TrimSpace(d)
			if d == "" {
				continue
			}
			if !slices.Contains(store.UsageDimensions, d) {
				return p, newErr("invalid_group_by", "group_by: %q is none of %s", d, strings.Join(store.UsageDimensions, ", "))
			}
			if slices.Contains(p.groupBy, d) {
				return p, newErr("invalid_group_by", "group_by: %q given twice", d)
			}
			p.groupBy = append(p.groupBy, d)
		}
	}
	switch f := q.Get("format"); f {
	case "csv":
		p.csv = true
	case "json":
	case "":
		p.csv = acceptsCSV(r.Header.Get("Accept"))
	default:
		return p, invalid("format: json or csv, got %q", f)
	}
	return p, nil
}

// acceptsCSV reports an Accept header that prefers text/csv to JSON (an
// explicit text/csv without application/json before it).
func acceptsCSV(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "text/csv":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

// usageReport serves GET /admin/v1/usage: requests, errors, tokens by class
// and cost over [from, to), grouped by any of principal, key, upstream and
// model. Whole hours the rollup job has covered come from the key
// rollups; the live hours and the partial hours at the edges from the
// request events, so recent traffic is included.
func (a *api) usageReport(w http.ResponseWriter, r *http.Request) error {
	now := a.Clock.Now().UTC()
	p, err := parseUsageParams(r, now)
	if err != nil {
		return err
	}
	live := now.Truncate(time.Hour).Add(-(liveHours - 1) * time.Hour)
	rows, err := a.Store.SumUsage(r.Context(), store.UsageQuery{From: p.from, To: p.to, LiveFrom: live, GroupBy: p.groupBy})
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	names, err := a.names(r)
	if err != nil {
		return err
	}
	out := UsageResponse{FromUnixSecs: p.from.Unix(), ToUnixSecs: p.to.Unix(), LiveFromUnixSecs: live.Unix(), GroupBy: p.groupBy, Rows: make([]UsageRow, 0, len(rows))}
	grouped := func(d string) bool { return slices.Contains(p.groupBy, d) }
	for _, u := range rows {
		var row UsageRow
		if grouped("principal") {
			id, name := u.PrincipalID, names.principal(u.PrincipalID)
			row.PrincipalID, row.PrincipalName = &id, &name
		}
		if grouped("key") {
			id := u.KeyID
			row.KeyID = &id
		}
		if grouped("upstream") {
			id, name := u.UpstreamID, names.upstream(u.UpstreamID)
			row.UpstreamID, row.UpstreamName = &id, &name
		}
		if grouped("model") {
			m := u.Model
			row.Model = &m
		}
		row.UsageTotals.addCounts(u.UsageCounts)
		out.Total.addCounts(u.UsageCounts)
		out.Rows = append(out.Rows, row)
	}
	out.Total.addCounts(store.UsageCounts{}) // cost_usd "0.00", not "", over no requests
	if !p.csv {
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	return writeUsageCSV(w, p.groupBy, out.Rows)
}

// writeUsageCSV writes a header row, then one row per group: the grouped
// dimensions (ids and current names) and the totals, cost in dollars.
func writeUsageCSV(w http.ResponseWriter, groupBy []string, rows []UsageRow) error {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="usage.csv"`)
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	var header []string
	for _, d := range store.UsageDimensions {
		if !slices.Contains(groupBy, d) {
			continue
		}
		switch d {
		case "principal":
			header = append(header, "principal_id", "principal_name")
		case "key":
			header = append(header, "key_id")
		case "upstream":
			header = append(header, "upstream_id", "upstream_name")
		case "model":
			header = append(header, "model")
		}
	}
	header = append(header, "requests", "errors", "input_tokens", "output_tokens", "cache_creation_input_tokens",
		"cache_creation_1h_input_tokens", "cache_read_input_tokens", "cost_usd", "unpriced_requests")
	_ = cw.Write(header) // a write error is the client leaving (see the return)
	for _, r := range rows {
		var rec []string
		for _, s := range []*string{r.PrincipalID, r.PrincipalName, r.KeyID, r.UpstreamID, r.UpstreamName, r.Model} {
			if s != nil {
				rec = append(rec, csvSafe(*s))
			}
		}
		t := r.UsageTotals
		for _, n := range []int64{t.Requests, t.Errors, t.InputTokens, t.OutputTokens, t.CacheCreationInputTokens, t.CacheCreation1hInputTokens, t.CacheReadInputTokens} {
			rec = append(rec, strconv.FormatInt(n, 10))
		}
		rec = append(rec, t.CostUSD, strconv.FormatInt(t.UnpricedRequests, 10))
		_ = cw.Write(rec)
	}
	cw.Flush()
	return nil // the status is sent; a write error is the client's going away
}

// csvSafe keeps a name a spreadsheet would run as a formula inert: names
// and model ids come from API callers.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// formatCost is a cost in nano-dollars as decimal dollars.
func formatCost(n int64) string { return money.Nanos(n).String() }
