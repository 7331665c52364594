package admin

import (
	"bytes"
	"encoding/json"
)

// CacheKeepalive is the normalised prompt-cache keep-alive configuration of
// a principal. Omitted fields take their defaults; values outside their
// bounds are refused. docs/admin-api.md lists both.
type CacheKeepalive struct {
	Enabled                bool                `json:"enabled"`
	RefreshLeadTime5mSecs  int64               `json:"refresh_lead_time_5m_secs"`
	RefreshLeadTime1hSecs  int64               `json:"refresh_lead_time_1h_secs"`
	MaxRefreshesPerSession int64               `json:"max_refreshes_per_session"`
	MaxTotalDurationSecs   int64               `json:"max_total_duration_secs"`
	SnapshotMaxBytes       int64               `json:"snapshot_max_bytes"`
	Classifier             KeepaliveClassifier `json:"classifier"`
}

// KeepaliveClassifier decides whether a conversation waits on its user.
type KeepaliveClassifier struct {
	ExtraWaitForUserTools   []string `json:"extra_wait_for_user_tools"`
	TreatEndTurnAsAmbiguous bool     `json:"treat_end_turn_as_ambiguous"`
}

type kaBound struct {
	name          string
	def, min, max int64
}

// Defaults and bounds of the numeric keep-alive fields.
var kaBounds = []kaBound{
	{"refresh_lead_time_5m_secs", 30, 5, 240},
	{"refresh_lead_time_1h_secs", 120, 5, 3540},
	{"max_refreshes_per_session", 12, 1, 1000},
	{"max_total_duration_secs", 3600, 60, 86400},
	{"snapshot_max_bytes", 2 << 20, 1024, 32 << 20},
}

// cacheKeepaliveBody is cache_keepalive as a client sends it: every field
// optional so that defaults can be told from explicit values.
type cacheKeepaliveBody struct {
	Enabled                *bool  `json:"enabled"`
	RefreshLeadTime5mSecs  *int64 `json:"refresh_lead_time_5m_secs"`
	RefreshLeadTime1hSecs  *int64 `json:"refresh_lead_time_1h_secs"`
	MaxRefreshesPerSession *int64 `json:"max_refreshes_per_session"`
	MaxTotalDurationSecs   *int64 `json:"max_total_duration_secs"`
	SnapshotMaxBytes       *int64 `json:"snapshot_max_bytes"`
	// Classifier is decoded on its own so errors name its full path.
	Classifier json.RawMessage `json:"classifier"`
}

type keepaliveClassifierBody struct {
	ExtraWaitForUserTools   []string        `json:"extra_wait_for_user_tools"`
	TreatEndTurnAsAmbiguous *bool           `json:"treat_end_turn_as_ambiguous"`
	LLMJudge                json.RawMessage `json:"llm_judge"`
}

// NormalizeCacheKeepalive validates a cache_keepalive value and returns it
// with defaults filled in; null or absent returns nil (keep-alive off).
func NormalizeCacheKeepalive(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var in cacheKeepaliveBody
	if err := decodeStrict(raw, &in, "cache_keepalive."); err != nil {
		return nil, err
	}
	var cl *keepaliveClassifierBody
	if len(in.Classifier) > 0 && string(in.Classifier) != "null" {
		cl = new(keepaliveClassifierBody)
		if err := decodeStrict(in.Classifier, cl, "cache_keepalive.classifier."); err != nil {
			return nil, err
		}
	}
	if cl != nil && len(cl.LLMJudge) > 0 && string(cl.LLMJudge) != "null" {
		return nil, newErr("unsupported_cache_keepalive_llm_judge", "cache_keepalive.classifier.llm_judge: reserved and not supported; leave it out")
	}
	if in.Enabled == nil {
		return nil, invalid("cache_keepalive.enabled: required when cache_keepalive is present")
	}
	out := CacheKeepalive{Enabled: *in.Enabled, Classifier: KeepaliveClassifier{ExtraWaitForUserTools: []string{}}}
	vals := []*int64{in.RefreshLeadTime5mSecs, in.RefreshLeadTime1hSecs, in.MaxRefreshesPerSession, in.MaxTotalDurationSecs, in.SnapshotMaxBytes}
	dst := []*int64{&out.RefreshLeadTime5mSecs, &out.RefreshLeadTime1hSecs, &out.MaxRefreshesPerSession, &out.MaxTotalDurationSecs, &out.SnapshotMaxBytes}
	for i, b := range kaBounds {
		v := b.def
		if vals[i] != nil {
			v = *vals[i]
		}
		if v < b.min || v > b.max {
			return nil, invalid("cache_keepalive.%s: must be %d to %d, got %d", b.name, b.min, b.max, v)
		}
		*dst[i] = v
	}
	if c := cl; c != nil {
		if len(c.ExtraWaitForUserTools) > 64 {
			return nil, invalid("cache_keepalive.classifier.extra_wait_for_user_tools: at most 64 tool names")
		}
		for i, t := range c.ExtraWaitForUserTools {
			if t == "" || len(t) > 128 {
				return nil, invalid("cache_keepalive.classifier.extra_wait_for_user_tools[%d]: tool names are 1 to 128 characters", i)
			}
		}
		if c.ExtraWaitForUserTools != nil {
			out.Classifier.ExtraWaitForUserTools = c.ExtraWaitForUserTools
		}
		if c.TreatEndTurnAsAmbiguous != nil {
			out.Classifier.TreatEndTurnAsAmbiguous = *c.TreatEndTurnAsAmbiguous
		}
	}
	b, _ := json.Marshal(out)
	return b, nil
}
