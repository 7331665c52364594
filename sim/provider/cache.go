package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"time"
)

// Prompt caching, as the API does it: a cache_control breakpoint on a tool,
// a system block or a message content block caches the prompt prefix up to
// and including that block, per account, for its TTL (ephemeral 5 minutes,
// or "ttl":"1h") on the sim's clock. A later request whose prompt starts
// with a cached prefix reads it (cache_read_input_tokens) and renews its
// TTL; the part up to its last breakpoint that was not cached is written
// (cache_creation_input_tokens); the rest is plain input_tokens.

type cacheSegment struct {
	// key is the hash of the prompt up to and including this segment.
	key    [sha256.Size]byte
	tokens int
	// ttl is the breakpoint's TTL; zero when the segment has none.
	ttl time.Duration
}

type cacheReq struct {
	Tools    []json.RawMessage `json:"tools"`
	System   json.RawMessage   `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

type cacheBlock struct {
	Text         string `json:"text"`
	Name         string `json:"name"`
	Description  string `json:"description"`
	CacheControl *struct {
		Type string `json:"type"`
		TTL  string `json:"ttl"`
	} `json:"cache_control"`
}

// canonical drops cache_control from a block, so moving a breakpoint does
// not change the prefix it marks.
func canonical(raw json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	delete(m, "cache_control")
	b, _ := json.Marshal(m)
	return b
}

// segments splits a request's prompt into cacheable segments in prompt
// order (tools, system, messages), with running prefix hashes.
func segments(body []byte) ([]cacheSegment, bool) {
	if !bytes.Contains(body, []byte(`"cache_control"`)) {
		return nil, false
	}
	var r cacheReq
	if json.Unmarshal(body, &r) != nil {
		return nil, false
	}
	h := sha256.New()
	var out []cacheSegment
	add := func(raw json.RawMessage, tokens int, marker string) {
		h.Write([]byte(marker))
		h.Write(canonical(raw))
		var b cacheBlock
		_ = json.Unmarshal(raw, &b)
		seg := cacheSegment{tokens: tokens}
		if b.CacheControl != nil {
			seg.ttl = 5 * time.Minute
			if b.CacheControl.TTL == "1h" {
				seg.ttl = time.Hour
			}
		}
		copy(seg.key[:], h.Sum(nil))
		out = append(out, seg)
	}
	blockTokens := func(raw json.RawMessage) int {
		var b cacheBlock
		_ = json.Unmarshal(raw, &b)
		return CountTokens(b.Text)
	}
	for _, t := range r.Tools {
		add(t, 0, "tool")
	}
	var sys []json.RawMessage
	if json.Unmarshal(r.System, &sys) == nil {
		for _, b := range sys {
			add(b, blockTokens(b), "system")
		}
	} else if len(r.System) > 0 {
		var s string
		_ = json.Unmarshal(r.System, &s)
		add(r.System, CountTokens(s), "system")
	}
	for _, m := range r.Messages {
		var blocks []json.RawMessage
		if json.Unmarshal(m.Content, &blocks) == nil {
			for _, b := range blocks {
				add(b, blockTokens(b), "msg:"+m.Role)
			}
			continue
		}
		var s string
		_ = json.Unmarshal(m.Content, &s)
		add(m.Content, CountTokens(s), "msg:"+m.Role)
	}
	return out, true
}

// cacheUsage is what caching did to a request's input.
type cacheUsage struct {
	read, creation5m, creation1h int
}

// applyCache reads and writes the account's prompt cache for a request,
// at now. total is the request's input token count.
func (p *Provider) applyCache(account string, body []byte) (cacheUsage, bool) {
	segs, ok := segments(body)
	if !ok {
		return cacheUsage{}, false
	}
	last := -1
	for i, s := range segs {
		if s.ttl > 0 {
			last = i
		}
	}
	if last < 0 {
		return cacheUsage{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.now()
	c := p.caches[account]
	if c == nil {
		c = map[[sha256.Size]byte]cacheEntry{}
		p.caches[account] = c
	}
	// The longest cached prefix ending at a breakpoint is read.
	hit := -1
	for i := last; i >= 0; i-- {
		if e, ok := c[segs[i].key]; segs[i].ttl > 0 && ok && now.Before(e.expires) {
			hit = i
			break
		}
	}
	var u cacheUsage
	for i := 0; i <= hit; i++ {
		u.read += segs[i].tokens
	}
	// What lies between the hit and the last breakpoint is written, at the
	// TTL of the breakpoint that closes it.
	var pending int
	for i := hit + 1; i <= last; i++ {
		pending += segs[i].tokens
		if segs[i].ttl > 0 {
			if segs[i].ttl >= time.Hour {
				u.creation1h += pending
			} else {
				u.creation5m += pending
			}
			pending = 0
		}
	}
	// Every breakpoint of the request is (re)cached: reading renews.
	for i := 0; i <= last; i++ {
		if segs[i].ttl > 0 {
			c[segs[i].key] = cacheEntry{expires: now.Add(segs[i].ttl)}
		}
	}
	return u, true
}

type cacheEntry struct{ expires time.Time }
