package relay

import "github.com/pillarhq/pillar/impl/gateway/openai"

// translate turns a Chat Completions body into the Messages body relayed in
// its place, holding the translation's bytes against the global cap too.
func (h *Handler) translate(q *admitted, body []byte) ([]byte, error) {
	out, err := q.chat.Translate(body)
	if err != nil {
		return nil, err
	}
	if !h.held.take(int64(len(out))) {
		return nil, errOverloaded
	}
	q.held += int64(len(out))
	return out, nil
}

// The endpoints of OpenAI's dialect, as counted.
const (
	openAIChat   = 0
	openAIModels = 1
)

// finishChat completes a Chat Completions answer, then hands over its
// capture, which the translation's last write belongs to.
func (h *Handler) finishChat(x *openai.Writer, q *admitted) {
	h.finishOpenAI(x, openAIChat)
	if q.capture != nil {
		h.endCapture(q)
	}
	// The handler's last deferred call: nothing writes the answer after
	// it, so the writer is reused.
	q.chat = nil
	x.Release()
}

// finishOpenAI completes an answer in OpenAI's dialect and counts it.
func (h *Handler) finishOpenAI(x *openai.Writer, endpoint int) {
	x.Finish()
	if h.metrics != nil {
		failed := 0
		if x.Failed() {
			failed = 1
		}
		h.metrics.openAI[endpoint][failed].Inc()
	}
}
