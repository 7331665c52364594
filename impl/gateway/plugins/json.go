package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"net/textproto"
)

// The JSON documents of ABI v1 (every slot) and of the warm-up slot of v2.

// routeInputV1 is what an ABI v1 router receives, per call.
type routeInputV1 struct {
	ABI       int `json:"abi"`
	Principal struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"principal"`
	Model      string            `json:"model"`
	Stream     bool              `json:"stream"`
	Headers    map[string]string `json:"headers"`
	Config     json.RawMessage   `json:"config"`
	Candidates []Candidate       `json:"candidates"`
}

// routeOutputV1 is an ABI v1 router's answer.
type routeOutputV1 struct {
	Upstreams []string `json:"upstreams"`
	Refuse    *Refusal `json:"refuse,omitempty"`
}

// routeV1 runs an ABI v1 router: the whole request, config and candidates
// as JSON on every call. It is kept so modules uploaded before ABI v2 keep
// working; it allocates and costs what JSON in the guest costs.
func (b *Binding) routeV1(ctx context.Context, req *RouteRequest, cands, dst []uint16) ([]uint16, *Refusal, error) {
	in := routeInputV1{ABI: 1, Model: req.Model, Stream: req.Stream, Headers: map[string]string{}, Config: b.config,
		Candidates: make([]Candidate, 0, len(cands))}
	in.Principal.ID, in.Principal.Name = req.PrincipalID, req.PrincipalName
	for name, v := range map[string]string{"Anthropic-Beta": req.AnthropicBeta, "Anthropic-Version": req.AnthropicVersion, "User-Agent": req.UserAgent} {
		if v != "" {
			in.Headers[name] = v
		}
	}
	for _, c := range cands {
		if int(c) >= len(b.table) {
			return nil, nil, fmt.Errorf("candidate %d is not in the upstream table of %d", c, len(b.table))
		}
		in.Candidates = append(in.Candidates, b.table[c])
	}
	doc, err := json.Marshal(in)
	if err != nil {
		return nil, nil, err
	}
	raw, err := b.r.call(ctx, b.m.digest, "router", doc)
	if err != nil {
		return nil, nil, err
	}
	var out routeOutputV1
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, nil, fmt.Errorf("%w: not a route answer: %v", ErrGarbage, err)
	}
	if out.Refuse != nil {
		ref, err := refusal(out.Refuse.Status, out.Refuse.Type, out.Refuse.Message)
		return nil, ref, err
	}
	dst = dst[:0]
	seen := map[uint16]bool{}
	for _, id := range out.Upstreams {
		found := false
		for _, c := range cands {
			if b.table[c].ID == id && !seen[c] {
				seen[c], found = true, true
				dst = append(dst, c)
				break
			}
		}
		if !found {
			return nil, nil, fmt.Errorf("%w: upstream %q was not offered or is named twice", ErrGarbage, id)
		}
	}
	return dst, nil, nil
}

// WarmupInput is what a warm-up dialect plugin receives.
type WarmupInput struct {
	ABI      int               `json:"abi"`
	Upstream Candidate         `json:"upstream"`
	Request  json.RawMessage   `json:"request"`
	Headers  map[string]string `json:"headers"`
}

// WarmupOutput is its answer: the request to send, and headers to set.
type WarmupOutput struct {
	Request json.RawMessage   `json:"request"`
	Headers map[string]string `json:"headers"`
}

// ShapeWarmup lets a warm-up dialect plugin reshape an upstream's warm-up
// request (body and headers). Credentials are never shown to plugins and
// cannot be set by them.
func (r *Runtime) ShapeWarmup(ctx context.Context, digest string, up Candidate, body []byte, headers map[string]string) (_ []byte, _ map[string]string, err error) {
	defer r.obs["warmup_dialect"].observe(sinceEpoch(), &err)
	abi := 1
	if m := r.module(digest); m != nil {
		abi = m.abi
	}
	b, err := json.Marshal(WarmupInput{ABI: abi, Upstream: up, Request: body, Headers: headers})
	if err != nil {
		return nil, nil, err
	}
	raw, err := r.call(ctx, digest, "warmup_dialect", b)
	if err != nil {
		return nil, nil, err
	}
	var out WarmupOutput
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Request) == 0 || !json.Valid(out.Request) {
		return nil, nil, fmt.Errorf("%w: not a warm-up answer", ErrGarbage)
	}
	for k := range out.Headers {
		switch textproto.CanonicalMIMEHeaderKey(k) {
		case "Authorization", "X-Api-Key", "Host", "Content-Length", "Cookie":
			return nil, nil, fmt.Errorf("%w: header %s may not be set by a plugin", ErrGarbage, k)
		}
	}
	return out.Request, out.Headers, nil
}
