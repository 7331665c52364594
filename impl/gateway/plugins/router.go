package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"net/textproto"
	"time"
)

// ABIVersion is the version of the JSON documents exchanged with plugins.
const ABIVersion = 1

// RouteInput is what a router plugin receives.
type RouteInput struct {
	ABI       int         `json:"abi"`
	Principal PrincipalIn `json:"principal"`
	Model     string      `json:"model"`
	Stream    bool        `json:"stream"`
	// Headers are the request headers that matter for routing:
	// anthropic-beta, anthropic-version, user-agent.
	Headers map[string]string `json:"headers"`
	// Config is the chain entry's config object.
	Config json.RawMessage `json:"config"`
	// Candidates are the upstreams still in play, in order.
	Candidates []Candidate `json:"candidates"`
}

// PrincipalIn names the caller.
type PrincipalIn struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Candidate is one upstream a router may choose.
type Candidate struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Healthy: enabled with a usable credential (only such are offered).
	Healthy bool `json:"healthy"`
}

// RouteOutput is a router plugin's answer: an ordered choice among the
// candidates, or a refusal.
type RouteOutput struct {
	Upstreams []string `json:"upstreams"`
	Refuse    *Refusal `json:"refuse,omitempty"`
}

// Refusal refuses the request.
type Refusal struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Route runs a router plugin. Its answer must name only offered
// candidates, each at most once, or be a refusal; anything else is
// garbage.
func (r *Runtime) Route(ctx context.Context, digest string, in *RouteInput) (_ *RouteOutput, err error) {
	defer r.observe("router", time.Now(), &err)
	in.ABI = ABIVersion
	if len(in.Config) == 0 {
		in.Config = json.RawMessage("{}")
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	raw, err := r.call(ctx, digest, "router", b)
	if err != nil {
		return nil, err
	}
	var out RouteOutput
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: not a route answer: %v", ErrGarbage, err)
	}
	if out.Refuse != nil {
		if out.Refuse.Status == 0 {
			out.Refuse.Status = 403
		}
		if out.Refuse.Status < 400 || out.Refuse.Status > 599 {
			return nil, fmt.Errorf("%w: refusal status %d", ErrGarbage, out.Refuse.Status)
		}
		if out.Refuse.Type == "" {
			out.Refuse.Type = "permission_error"
		}
		if out.Refuse.Message == "" {
			out.Refuse.Message = "refused by a routing plugin"
		}
		return &out, nil
	}
	offered := make(map[string]bool, len(in.Candidates))
	for _, c := range in.Candidates {
		offered[c.ID] = true
	}
	seen := map[string]bool{}
	for _, id := range out.Upstreams {
		if !offered[id] || seen[id] {
			return nil, fmt.Errorf("%w: upstream %q was not offered or is named twice", ErrGarbage, id)
		}
		seen[id] = true
	}
	return &out, nil
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
	defer r.observe("warmup_dialect", time.Now(), &err)
	b, err := json.Marshal(WarmupInput{ABI: ABIVersion, Upstream: up, Request: body, Headers: headers})
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
