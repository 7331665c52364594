package relay

import (
	"net/http"
	"strconv"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/limits"
)

// The principal's own limits as Anthropic reports an organisation's (issue
// 23): limit, remaining and reset (RFC 3339) per kind. A tokens limit
// counts input, cache-write and output tokens together, so it is sent as
// the tokens-* headers only; there are no input-/output-tokens variants.
var limitHeaders = [3][3]string{
	limits.Requests: {"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	limits.Tokens:   {"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
}

// setLimitHeaders writes st into h. The values share one byte buffer and
// one backing array of header values: two allocations however many kinds.
func setLimitHeaders(h http.Header, st *limits.Status) {
	n := 0
	for k := range st {
		if st[k].Max > 0 {
			n++
		}
	}
	if n == 0 {
		return
	}
	var scratch [160]byte
	buf := scratch[:0]
	var ends [3][3]int
	for k := range st {
		s := &st[k]
		if s.Max == 0 {
			continue
		}
		buf = strconv.AppendInt(buf, s.Max, 10)
		ends[k][0] = len(buf)
		buf = strconv.AppendInt(buf, s.Remaining, 10)
		ends[k][1] = len(buf)
		buf = s.Reset.UTC().AppendFormat(buf, time.RFC3339)
		ends[k][2] = len(buf)
	}
	all := string(buf)
	vals := make([]string, 0, 3*n)
	from := 0
	for k := range st {
		if st[k].Max == 0 {
			continue
		}
		for i, end := range ends[k] {
			vals = append(vals, all[from:end])
			from = end
			h[limitHeaders[k][i]] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
}
