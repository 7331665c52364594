package openai

import (
	"encoding/json"
	"math"
	"strconv"
)

// The Messages body is appended field by field: reflection encoding was
// the larger part of a translation's CPU, which the Chat Completions path
// spends before its request leaves for the provider. The bytes are those
// json.Marshal writes for the same msgRequest (FuzzTranslate translates
// every input both ways and requires identical bodies and refusals).
// Raw JSON members (a tool's input, a tool's schema) are left to
// encoding/json, which compacts and escapes them.

// appendRequest appends the JSON of r.
func appendRequest(out []byte, r *msgRequest) ([]byte, error) {
	var err error
	out = append(out, `{"model":`...)
	out = appendString(out, r.Model)
	out = append(out, `,"max_tokens":`...)
	out = strconv.AppendInt(out, int64(r.MaxTokens), 10)
	if len(r.System) > 0 {
		out = append(out, `,"system":`...)
		if out, err = appendBlocks(out, r.System); err != nil {
			return nil, err
		}
	}
	out = append(out, `,"messages":`...)
	if r.Messages == nil {
		out = append(out, "null"...)
	} else {
		out = append(out, '[')
		for i := range r.Messages {
			if i > 0 {
				out = append(out, ',')
			}
			m := &r.Messages[i]
			out = append(out, `{"role":`...)
			out = appendString(out, m.Role)
			out = append(out, `,"content":`...)
			if out, err = appendBlocks(out, m.Content); err != nil {
				return nil, err
			}
			out = append(out, '}')
		}
		out = append(out, ']')
	}
	if len(r.StopSequences) > 0 {
		out = append(out, `,"stop_sequences":[`...)
		for i, s := range r.StopSequences {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, s)
		}
		out = append(out, ']')
	}
	if r.Temperature != nil {
		out = append(out, `,"temperature":`...)
		if out, err = appendFloat(out, *r.Temperature); err != nil {
			return nil, err
		}
	}
	if r.TopP != nil {
		out = append(out, `,"top_p":`...)
		if out, err = appendFloat(out, *r.TopP); err != nil {
			return nil, err
		}
	}
	if r.Stream {
		out = append(out, `,"stream":true`...)
	}
	if len(r.Tools) > 0 {
		out = append(out, `,"tools":[`...)
		for i := range r.Tools {
			if i > 0 {
				out = append(out, ',')
			}
			t := &r.Tools[i]
			out = append(out, `{"name":`...)
			out = appendString(out, t.Name)
			if t.Description != "" {
				out = append(out, `,"description":`...)
				out = appendString(out, t.Description)
			}
			out = append(out, `,"input_schema":`...)
			if out, err = appendRaw(out, t.InputSchema); err != nil {
				return nil, err
			}
			out = appendCacheControl(out, t.CacheControl)
			out = append(out, '}')
		}
		out = append(out, ']')
	}
	if c := r.ToolChoice; c != nil {
		out = append(out, `,"tool_choice":{"type":`...)
		out = appendString(out, c.Type)
		if c.Name != "" {
			out = append(out, `,"name":`...)
			out = appendString(out, c.Name)
		}
		if c.DisableParallelToolUse {
			out = append(out, `,"disable_parallel_tool_use":true`...)
		}
		out = append(out, '}')
	}
	if m := r.Metadata; m != nil {
		out = append(out, `,"metadata":{"user_id":`...)
		out = appendString(out, m.UserID)
		out = append(out, '}')
	}
	if r.ServiceTier != "" {
		out = append(out, `,"service_tier":`...)
		out = appendString(out, r.ServiceTier)
	}
	return append(out, '}'), nil
}

// appendBlocks appends a list of content blocks (null when nil, as
// encoding/json writes a nil slice).
func appendBlocks(out []byte, bs []block) ([]byte, error) {
	if bs == nil {
		return append(out, "null"...), nil
	}
	out = append(out, '[')
	for i := range bs {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = appendBlock(out, &bs[i]); err != nil {
			return nil, err
		}
	}
	return append(out, ']'), nil
}

func appendBlock(out []byte, b *block) ([]byte, error) {
	var err error
	out = append(out, `{"type":`...)
	out = appendString(out, b.Type)
	switch {
	case len(b.text) > 0:
		// plainText: the string as it stood in the request.
		out = append(out, `,"text":"`...)
		out = append(out, b.text...)
		out = append(out, '"')
	case b.Text != "":
		out = append(out, `,"text":`...)
		out = appendString(out, b.Text)
	}
	if s := b.Source; s != nil {
		out = append(out, `,"source":{"type":`...)
		out = appendString(out, s.Type)
		for _, f := range [...]struct{ key, v string }{{`,"media_type":`, s.MediaType}, {`,"data":`, s.Data}, {`,"url":`, s.URL}} {
			if f.v != "" {
				out = append(out, f.key...)
				out = appendString(out, f.v)
			}
		}
		out = append(out, '}')
	}
	if b.ID != "" {
		out = append(out, `,"id":`...)
		out = appendString(out, b.ID)
	}
	if b.Name != "" {
		out = append(out, `,"name":`...)
		out = appendString(out, b.Name)
	}
	if len(b.Input) > 0 {
		out = append(out, `,"input":`...)
		if out, err = appendRaw(out, b.Input); err != nil {
			return nil, err
		}
	}
	if b.ToolUseID != "" {
		out = append(out, `,"tool_use_id":`...)
		out = appendString(out, b.ToolUseID)
	}
	if len(b.Content) > 0 {
		out = append(out, `,"content":`...)
		if out, err = appendBlocks(out, b.Content); err != nil {
			return nil, err
		}
	}
	out = appendCacheControl(out, b.CacheControl)
	return append(out, '}'), nil
}

func appendCacheControl(out []byte, c *cacheControl) []byte {
	if c == nil {
		return out
	}
	out = append(out, `,"cache_control":{"type":`...)
	out = appendString(out, c.Type)
	return append(out, '}')
}

// appendRaw appends raw JSON as encoding/json writes a json.RawMessage:
// null when nil, otherwise compacted and HTML-escaped, refused when invalid.
func appendRaw(out []byte, raw json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return append(out, b...), nil
}

// appendFloat appends f as encoding/json writes a float64: the shortest
// representation, in exponent form only for very small or large values,
// with a one-digit negative exponent unpadded.
func appendFloat(out []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		_, err := json.Marshal(f) // encoding/json's refusal
		return nil, err
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(out)
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		if n := len(out) - start; n >= 4 && out[len(out)-4] == 'e' && out[len(out)-3] == '-' && out[len(out)-2] == '0' {
			out[len(out)-2] = out[len(out)-1]
			out = out[:len(out)-1]
		}
	}
	return out, nil
}
