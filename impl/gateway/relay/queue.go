package relay

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// admitSlot takes the principal's slot under its max_in_flight, waiting in
// its queue when the cap is reached; false when it answered the refusal.
// An uncapped principal passes without a lock.
func (h *Handler) admitSlot(w http.ResponseWriter, r *http.Request, p *snapshot.Principal, q *admitted, refuse func(int, string, string)) bool {
	if p.MaxInFlight <= 0 || h.admission == nil {
		return true
	}
	slot, err := h.admission.Admit(r.Context(), p.ID, p.MaxInFlight)
	if err == nil {
		q.slot = slot
		return true
	}
	var ref *admission.Refusal
	if !errors.As(err, &ref) {
		// The client left while queued: nobody reads the answer.
		refuse(http.StatusServiceUnavailable, "api_error", "the request was canceled while queued")
		return false
	}
	if h.metrics != nil {
		h.metrics.queueRefused.Inc()
	}
	// Anthropic's answer to a rate limit, with an honest estimate of when
	// a slot frees (the SDKs honour retry-after up to a minute).
	w.Header().Set("Retry-After", strconv.FormatInt(int64((ref.RetryAfter+time.Second-1)/time.Second), 10))
	w.Header().Set("X-Should-Retry", strconv.FormatBool(ref.RetryAfter <= maxClientRetryWait))
	refuse(http.StatusTooManyRequests, "rate_limit_error", ref.Error()+" (max_in_flight "+strconv.Itoa(p.MaxInFlight)+")")
	return false
}
