package relay

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
