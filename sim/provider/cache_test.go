package provider

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type usageOf struct {
	Usage struct {
		InputTokens              int `json:"input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreation            *struct {
			E5m int `json:"ephemeral_5m_input_tokens"`
			E1h int `json:"ephemeral_1h_input_tokens"`
		} `json:"cache_creation"`
	} `json:"usage"`
}

// A system block of 4 words and a document of 6 words, both breakpoints;
// then a 2-word question.
const cachedTurn = `{"model":"m","max_tokens":2,"system":[{"type":"text","text":"be brief and exact","cache_control":{"type":"ephemeral"}}],
"messages":[{"role":"user","content":[{"type":"text","text":"one two three four five six","cache_control":{"type":"ephemeral"}},{"type":"text","text":"why not"}]}]}`

func (e *oauthEnv) cacheUsage(t *testing.T, body string) usageOf {
	t.Helper()
	st, _, b := e.do(t, "POST", "/v1/messages", body, "x-api-key", DefaultAPIKey, "anthropic-version", "2023-06-01")
	if st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	var u usageOf
	json.Unmarshal(b, &u)
	return u
}

func TestPromptCache(t *testing.T) {
	e := newOAuthEnv(t, Options{})
	u := e.cacheUsage(t, cachedTurn)
	if u.Usage.CacheCreationInputTokens != 10 || u.Usage.CacheReadInputTokens != 0 || u.Usage.InputTokens != 2 || u.Usage.CacheCreation.E5m != 10 {
		t.Fatalf("first: %+v", u.Usage)
	}
	// Four minutes later: a hit, which renews the TTL.
	e.p.Advance(4 * time.Minute)
	u = e.cacheUsage(t, cachedTurn)
	if u.Usage.CacheReadInputTokens != 10 || u.Usage.CacheCreationInputTokens != 0 || u.Usage.InputTokens != 2 {
		t.Fatalf("hit: %+v", u.Usage)
	}
	e.p.Advance(4 * time.Minute)
	if u = e.cacheUsage(t, cachedTurn); u.Usage.CacheReadInputTokens != 10 {
		t.Fatalf("the read did not renew the TTL: %+v", u.Usage)
	}
	// Idle past the TTL: a miss.
	e.p.Advance(6 * time.Minute)
	if u = e.cacheUsage(t, cachedTurn); u.Usage.CacheReadInputTokens != 0 || u.Usage.CacheCreationInputTokens != 10 {
		t.Fatalf("miss: %+v", u.Usage)
	}
	// A longer prompt reads the longest cached prefix and writes the rest;
	// the breakpoint marker itself is not part of the prefix.
	longer := strings.Replace(cachedTurn, `{"type":"text","text":"why not"}`,
		`{"type":"text","text":"why not"},{"type":"text","text":"seven eight","cache_control":{"type":"ephemeral","ttl":"1h"}}`, 1)
	u = e.cacheUsage(t, longer)
	if u.Usage.CacheReadInputTokens != 10 || u.Usage.CacheCreationInputTokens != 4 || u.Usage.CacheCreation.E1h != 4 || u.Usage.InputTokens != 0 {
		t.Fatalf("longer: %+v", u.Usage)
	}
	// The 1h part outlives the 5m one.
	e.p.Advance(30 * time.Minute)
	if u = e.cacheUsage(t, longer); u.Usage.CacheReadInputTokens != 14 {
		t.Fatalf("1h prefix: %+v", u.Usage)
	}
	// Caches are per account.
	e2 := newOAuthEnv(t, Options{APIKeys: []string{"k1", "k2"}})
	do := func(key string) usageOf {
		_, _, b := e2.do(t, "POST", "/v1/messages", cachedTurn, "x-api-key", key, "anthropic-version", "2023-06-01")
		var u usageOf
		json.Unmarshal(b, &u)
		return u
	}
	do("k1")
	if u := do("k2"); u.Usage.CacheReadInputTokens != 0 {
		t.Fatal("a cache was shared across accounts")
	}
	// Without breakpoints nothing changes in the usage shape.
	if u := e.cacheUsage(t, `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`); u.Usage.CacheCreation != nil {
		t.Fatal("cache_creation on a request without breakpoints")
	}
}
