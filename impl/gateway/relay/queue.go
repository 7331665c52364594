package relay

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// admitSlot takes the principal's slot under its max_in_flight, waiting in
// its queue when the cap is reached; false when it answered the refusal.
// An uncapped principal passes without a lock.
func (h *Handler) admitSlot(w http.ResponseWriter, r *http.Request, p *snapshot.Principal, q *admitted, refused *store.RequestEvent) bool {
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
		h.reply(w, r, proxyerr.API(http.StatusServiceUnavailable, "the request was canceled while queued"), refused)
		return false
	}
	if h.metrics != nil {
		h.metrics.queueRefused.Inc()
	}
	// Anthropic's answer to a rate limit, with an honest estimate of when
	// a slot frees.
	h.reply(w, r, proxyerr.RateLimited(ref.Error()+" (max_in_flight "+strconv.Itoa(p.MaxInFlight)+")", ref.RetryAfter), refused)
	return false
}
