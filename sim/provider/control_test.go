package provider

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestClockAPI(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_000_000, 0)
	// An injected running clock: the sim's clock follows it, shifted by moves.
	p, srv := newServer(t, Options{Clock: func() time.Time { return base }})
	clock := func(method, body string) (unix int64) {
		t.Helper()
		var c struct {
			NowUnix int64  `json:"now_unix"`
			Now     string `json:"now"`
		}
		if err := json.Unmarshal([]byte(control(t, srv.URL, method, "/_sim/clock", body)), &c); err != nil {
			t.Fatal(err)
		}
		if at, err := time.Parse(time.RFC3339Nano, c.Now); err != nil || at.Unix() != c.NowUnix {
			t.Fatalf("now %q vs now_unix %d", c.Now, c.NowUnix)
		}
		return c.NowUnix
	}
	if got := clock("GET", ""); got != 1_000_000 {
		t.Fatalf("start %d", got)
	}
	if got := clock("POST", `{"advance_secs":90}`); got != 1_000_090 {
		t.Fatalf("advanced %d", got)
	}
	base = base.Add(10 * time.Second) // the injected clock runs on; the shift stays
	if got := p.Now().Unix(); got != 1_000_100 {
		t.Fatalf("running %d", got)
	}
	if got := clock("POST", `{"now_unix":5}`); got != 5 {
		t.Fatalf("set %d", got)
	}
	base = base.Add(time.Hour) // a set clock stands still
	if got := clock("POST", `{"advance_secs":1.5}`); got != 6 || p.Now() != time.Unix(6, 5e8) {
		t.Fatalf("advanced a set clock to %v", p.Now())
	}
	for _, bad := range []string{`{}`, `{"now_unix":1,"advance_secs":1}`, `{"now":1}`, `nope`} {
		if res, body := send(t, "POST", srv.URL+"/_sim/clock", bad, nil); res.StatusCode != 400 || !strings.Contains(body, `"error"`) {
			t.Fatalf("%s: %d %s", bad, res.StatusCode, body)
		}
	}
	// The clock stamps recorded requests.
	post(t, srv.URL+"/v1/messages", `{}`, nil)
	if at := p.Requests()[0].At; !at.Equal(time.Unix(6, 5e8)) {
		t.Fatalf("recorded at %v", at)
	}
}

func TestRecording(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{})
	post(t, srv.URL+"/v1/messages?beta=true", `{"model":"m","max_tokens":1,"messages":[]}`, map[string]string{"x-custom": "v"})
	post(t, srv.URL+"/v1/messages", `{}`, map[string]string{"x-api-key": "wrong"}) // rejected requests are recorded too
	control(t, srv.URL, "GET", "/_sim/clock", "")                                  // control calls are not
	var recs []Recorded
	if err := json.Unmarshal([]byte(control(t, srv.URL, "GET", "/_sim/requests", "")), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("recorded %+v", recs)
	}
	r := recs[0]
	if r.Seq != 1 || r.Method != "POST" || r.Path != "/v1/messages" || r.RawQuery != "beta=true" || r.Header.Get("X-Custom") != "v" ||
		r.Header.Get("X-Api-Key") != DefaultAPIKey || r.Body != `{"model":"m","max_tokens":1,"messages":[]}` {
		t.Fatalf("first %+v", r)
	}
	if recs[1].Seq != 2 || recs[1].Header.Get("X-Api-Key") != "wrong" {
		t.Fatalf("newest last: %+v", recs[1])
	}
	control(t, srv.URL, "DELETE", "/_sim/requests", "")
	if got := control(t, srv.URL, "GET", "/_sim/requests", ""); got != "[]" || len(p.Requests()) != 0 {
		t.Fatalf("after clearing: %s", got)
	}
}

// The log keeps the newest requests, bounded by count and by body bytes.
func TestRecordingBounded(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{MaxRecorded: 3})
	for i := range 5 {
		post(t, srv.URL+"/v1/messages", fmt.Sprint(i), nil)
	}
	var bodies []string
	for _, r := range p.Requests() {
		bodies = append(bodies, r.Body)
	}
	if strings.Join(bodies, ",") != "2,3,4" {
		t.Fatalf("kept %v", bodies)
	}

	off, srv := newServer(t, Options{MaxRecorded: -1})
	post(t, srv.URL+"/v1/messages", `{}`, nil)
	if len(off.Requests()) != 0 {
		t.Fatal("recording was off")
	}

	l := requestLog{max: 100, maxBytes: 10}
	for i := range 1000 {
		l.add(loggedRequest{Recorded: Recorded{Seq: int64(i)}, body: make([]byte, 4)})
	}
	got := l.list()
	if len(got) != 2 || got[0].Seq != 998 || got[1].Seq != 999 || l.bytes != 8 || len(l.items) > 200 {
		t.Fatalf("byte-bounded log: %d items, bytes %d, backing %d", len(got), l.bytes, len(l.items))
	}
	l.add(loggedRequest{Recorded: Recorded{Seq: 1000}, body: make([]byte, 50)}) // one oversized body is still kept
	if got := l.list(); len(got) != 1 || got[0].Seq != 1000 {
		t.Fatalf("oversized: %+v", got)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	p, srv := newServer(t, Options{Now: t0, RequestsPerMinute: 10})
	body := `{"model":"m","max_tokens":1,"messages":[]}`
	post(t, srv.URL+"/v1/messages", body, nil)
	p.AddFault(Fault{Status: 500})
	p.SetCatalogVersion(3)
	p.Advance(time.Hour)
	control(t, srv.URL, "POST", "/_sim/reset", "")
	if len(p.Requests()) != 0 || len(p.Faults()) != 0 || !p.Now().Equal(t0) {
		t.Fatalf("after reset: %d requests, faults %v, clock %v", len(p.Requests()), p.Faults(), p.Now())
	}
	res, _ := post(t, srv.URL+"/v1/messages", body, nil)
	if res.StatusCode != 200 || res.Header.Get("anthropic-ratelimit-requests-remaining") != "9" {
		t.Fatalf("accounts not reset: %d %v", res.StatusCode, res.Header)
	}
	if _, b := send(t, "GET", srv.URL+CatalogPath, "", nil); !strings.Contains(b, `"version":"v1"`) {
		t.Fatalf("catalog not reset: %s", b)
	}
}

func TestControlUnknown(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	for _, c := range [][2]string{{"GET", "/_sim/nothing"}, {"PUT", "/_sim/clock"}, {"GET", "/_sim/reset"}} {
		if res, body := send(t, c[0], srv.URL+c[1], "", nil); res.StatusCode != 404 || !strings.Contains(body, `"error"`) {
			t.Fatalf("%v: %d %s", c, res.StatusCode, body)
		}
	}
}
