package openai

import (
	"encoding/json"
	"testing"
)

// The appended string is encoding/json's for every byte alone, amid ASCII
// and at either end, and for the runes it treats apart.
func TestAppendStringIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	var in []string
	for c := 0; c < 256; c++ {
		b := string([]byte{byte(c)})
		in = append(in, b, "a"+b+"z", b+"ok", "ok"+b)
	}
	in = append(in, "", "\u2028", "\u2029", "é", "\ufffd", "\xed\xa0\x80", "plain text", `{"a":1}`)
	for _, v := range in {
		want, _ := json.Marshal(v)
		if got := appendString([]byte("x"), v); string(got) != "x"+string(want) {
			t.Errorf("appendString(%q) = %s, encoding/json: %s", v, got[1:], want)
		}
	}
}
