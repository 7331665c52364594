package provider

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const streamBody = `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"a b c"}]}`

// control calls the control API and fails the test on an error status.
func control(t *testing.T, base, method, path, body string) string {
	t.Helper()
	res, out := send(t, method, base+path, body, nil)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, out)
	}
	return out
}

func TestFaultStatus(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	u := srv.URL + "/v1/messages"
	control(t, srv.URL, "POST", "/_sim/faults", `{"path":"/v1/messages","count":1,"status":429,"retry_after":7}`)
	control(t, srv.URL, "POST", "/_sim/faults", `[{"path":"/v1/messages","count":2,"status":500},{"count":1,"status":529}]`)
	control(t, srv.URL, "POST", "/_sim/faults", `{"path":"/v1/messages","count":1,"status":503,"error_type":"overloaded_error"}`)
	for i, want := range []struct {
		status           int
		typ, retry, soft string
	}{
		{429, "rate_limit_error", "7", "true"}, // queued faults are consumed in order
		{500, "api_error", "", "true"},
		{500, "api_error", "", "true"},
		{529, "overloaded_error", "", "true"},
		{503, "overloaded_error", "", "true"},
	} {
		res, body := post(t, u, streamBody, nil)
		if res.StatusCode != want.status || errType(t, body) != want.typ || res.Header.Get("retry-after") != want.retry ||
			res.Header.Get("x-should-retry") != want.soft || res.Header.Get("request-id") == "" {
			t.Fatalf("request %d: %d %v %s", i, res.StatusCode, res.Header, body)
		}
	}
	if res, _ := post(t, u, streamBody, nil); res.StatusCode != 200 {
		t.Fatalf("used-up faults still apply: %d", res.StatusCode)
	}

	// A persistent fault stays on its path until cleared.
	control(t, srv.URL, "POST", "/_sim/faults", `{"path":"/v1/messages/count_tokens","status":400}`)
	for range 3 {
		if res, body := post(t, srv.URL+"/v1/messages/count_tokens", `{"model":"m","messages":[]}`, nil); res.StatusCode != 400 ||
			errType(t, body) != "invalid_request_error" || res.Header.Get("x-should-retry") != "false" {
			t.Fatalf("persistent fault: %d %s", res.StatusCode, body)
		}
	}
	if res, _ := post(t, u, streamBody, nil); res.StatusCode != 200 {
		t.Fatal("fault applied to another path")
	}
	if got := control(t, srv.URL, "GET", "/_sim/faults", ""); got != `[{"path":"/v1/messages/count_tokens","status":400}]` {
		t.Fatalf("listing %s", got)
	}
	control(t, srv.URL, "DELETE", "/_sim/faults", "")
	if res, _ := post(t, srv.URL+"/v1/messages/count_tokens", `{"model":"m","messages":[]}`, nil); res.StatusCode != 200 {
		t.Fatal("cleared fault still applies")
	}
}

func TestFaultValidation(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{})
	for _, body := range []string{
		`{"staus":429}`, // misspelt keys fail loudly
		`{"status":200}`,
		`{"latency_ms":-1}`,
		`{"path":"v1/messages"}`,
		`[{"status":429},{"status":1}]`, // a list is queued whole or not at all
		`nope`,
	} {
		if res, out := send(t, "POST", srv.URL+"/_sim/faults", body, nil); res.StatusCode != 400 || !strings.Contains(out, `"error"`) {
			t.Fatalf("%s: %d %s", body, res.StatusCode, out)
		}
	}
	if fs := p.Faults(); len(fs) != 0 {
		t.Fatalf("queued %v", fs)
	}
}

func TestFaultHeaderGrammar(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want Fault
	}{
		{"status=529", Fault{Status: 529}},
		{" status = 429 ; retry_after=3;error_type=rate_limit_error; ", Fault{Status: 429, RetryAfter: 3, ErrorType: "rate_limit_error"}},
		{"drop_before_headers", Fault{DropBeforeHeaders: true}},
		{"drop_before_headers=false;latency_ms=5", Fault{LatencyMS: 5}},
		{"message_start_delay_ms=1;first_event_delay_ms=2;drop_after_events=3;error_after_events=4",
			Fault{MessageStartDelayMS: 1, FirstEventDelayMS: 2, DropAfterEvents: 3, ErrorAfterEvents: 4}},
	} {
		f, err := ParseFault(c.in)
		if err != nil || !reflect.DeepEqual(*f, c.want) {
			t.Errorf("ParseFault(%q) = %+v, %v", c.in, f, err)
		}
	}
	for in, msg := range map[string]string{
		"bogus=1":               `"bogus=1": unknown key`,
		"status=abc":            `"status=abc"`,
		"path=/v1/messages":     "unknown key", // the header already targets its request
		"status=299":            "not an error status",
		"latency_ms=-5":         "negative",
		"error_type=":           "empty value",
		"drop_before_headers=x": "drop_before_headers",
	} {
		if _, err := ParseFault(in); err == nil || !strings.Contains(err.Error(), msg) || !strings.HasPrefix(err.Error(), "x-sim-fault: ") {
			t.Errorf("ParseFault(%q) error %v, want it to mention %q", in, err, msg)
		}
	}

	// Over the wire: the header targets one request and wins over a queued
	// fault, which stays queued; a malformed header is the caller's error.
	p, srv := newServer(t, Options{})
	p.AddFault(Fault{Count: 1, Status: 500})
	res, body := post(t, srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": "status=529"})
	if res.StatusCode != 529 || errType(t, body) != "overloaded_error" || len(p.Faults()) != 1 {
		t.Fatalf("header fault: %d %s, queued %v", res.StatusCode, body, p.Faults())
	}
	res, body = post(t, srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": "status=5x9"})
	if res.StatusCode != 400 || errType(t, body) != "invalid_request_error" || !strings.Contains(body, "x-sim-fault") {
		t.Fatalf("malformed header: %d %s", res.StatusCode, body)
	}
}

// delayProbe stands in for the wall clock of injected latency: it reports
// each requested delay and holds it until the test releases it.
type delayProbe struct {
	asked   chan time.Duration
	release chan struct{}
}

func newDelayProbe() *delayProbe {
	return &delayProbe{asked: make(chan time.Duration, 8), release: make(chan struct{})}
}

func (d *delayProbe) delay(ctx context.Context, dur time.Duration) error {
	d.asked <- dur
	select {
	case <-d.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestFaultLatencyBeforeResponse(t *testing.T) {
	t.Parallel()
	probe := newDelayProbe()
	_, srv := newServer(t, Options{Delay: probe.delay})
	type result struct {
		res  *http.Response
		body string
	}
	done := make(chan result, 1)
	go func() {
		res, err := http.DefaultClient.Do(newRequest(t, "POST", srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": "latency_ms=250;status=500"}))
		if err != nil {
			done <- result{}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		done <- result{res, string(b)}
	}()
	if d := <-probe.asked; d != 250*time.Millisecond {
		t.Fatalf("asked for %v", d)
	}
	select {
	case <-done:
		t.Fatal("answered during the latency")
	default:
	}
	close(probe.release)
	r := <-done
	if r.res == nil || r.res.StatusCode != 500 || errType(t, r.body) != "api_error" {
		t.Fatalf("after latency: %+v", r)
	}
}

// The default delay is a real timer.
func TestFaultLatencyWallClock(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	start := time.Now()
	res, _ := post(t, srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": "latency_ms=40"})
	if res.StatusCode != 200 || time.Since(start) < 40*time.Millisecond {
		t.Fatalf("%d after %v", res.StatusCode, time.Since(start))
	}
}

func TestFaultStreamDelays(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		fault string
		// before is how many events the client can read while the delay holds.
		before int
	}{
		{"message_start_delay_ms=70", 0},
		{"first_event_delay_ms=80", 1},
	} {
		probe := newDelayProbe()
		_, srv := newServer(t, Options{Delay: probe.delay})
		// The headers arrive while the delay holds: they are flushed first.
		res, err := http.DefaultClient.Do(newRequest(t, "POST", srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": c.fault}))
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%s: %v", c.fault, err)
		}
		d := <-probe.asked
		if want := strings.SplitN(c.fault, "=", 2)[1] + "ms"; d.String() != want {
			t.Fatalf("%s: asked for %v", c.fault, d)
		}
		rd := bufio.NewReader(res.Body)
		var got []string
		for range c.before {
			ev, err := readEvent(rd)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.name)
		}
		close(probe.release)
		rest, err := io.ReadAll(rd)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		all := append(got, strings.Fields(names(readEvents(t, string(rest))))...)
		if len(got) > 0 && got[0] != "message_start" || strings.Join(all, " ") !=
			"message_start content_block_start ping content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop" {
			t.Fatalf("%s: before the delay %v, in all %v", c.fault, got, all)
		}
	}
}

func TestFaultDrops(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{})
	// Before headers: a transport error, whether queued or asked for.
	p.AddFault(Fault{Path: "/v1/messages", Count: 1, DropBeforeHeaders: true})
	for _, hdr := range []map[string]string{nil, {"x-sim-fault": "drop_before_headers"}} {
		if res, err := http.DefaultClient.Do(newRequest(t, "POST", srv.URL+"/v1/messages", streamBody, hdr)); err == nil {
			res.Body.Close()
			t.Fatalf("dropped connection answered %d", res.StatusCode)
		}
	}
	// Mid-stream: a truncated body after exactly N events.
	res, err := http.DefaultClient.Do(newRequest(t, "POST", srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": "drop_after_events=2"}))
	if err != nil || res.StatusCode != 200 {
		t.Fatal(err)
	}
	got, rerr := io.ReadAll(res.Body)
	res.Body.Close()
	if rerr == nil || strings.Count(string(got), "event: ") != 2 || !strings.HasSuffix(string(got), "\n\n") {
		t.Fatalf("mid-stream drop: err=%v body=%q", rerr, got)
	}
	// The server is still healthy afterwards.
	if res, _ := post(t, srv.URL+"/v1/messages", streamBody, nil); res.StatusCode != 200 {
		t.Fatal("server broken after drops")
	}
}

func TestFaultMidStreamErrorEvent(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	for fault, typ := range map[string]string{"error_after_events=3": "overloaded_error", "error_after_events=4;error_type=api_error": "api_error"} {
		res, body := post(t, srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": fault})
		evs := readEvents(t, body)
		n := len(evs) - 1
		last := evs[n]
		if res.StatusCode != 200 || last.name != "error" || last.data["error"].(map[string]any)["type"] != typ ||
			names(evs[:n]) != strings.Join(strings.Fields("message_start content_block_start ping content_block_delta")[:n], " ") {
			t.Fatalf("%s: %d %s", fault, res.StatusCode, body)
		}
	}
}

// A client that gives up during injected latency frees the handler.
func TestFaultLatencyCancelled(t *testing.T) {
	t.Parallel()
	probe := newDelayProbe()
	var handled sync.WaitGroup
	handled.Add(1)
	p := New(Options{Delay: probe.delay})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer handled.Done()
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	req := newRequest(t, "POST", srv.URL+"/v1/messages", streamBody, map[string]string{"x-sim-fault": "latency_ms=60000"}).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-probe.asked
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled request answered")
	}
	handled.Wait() // returns only because the delay saw the cancellation
}

// redirect_to answers 307 to the given URL with the request's path and
// query, and is refused unless absolute.
func TestFaultRedirect(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	control(t, srv.URL, "POST", "/_sim/faults", `{"path":"/v1/models","count":1,"redirect_to":"http://elsewhere.example/"}`)
	req := newRequest(t, "GET", srv.URL+"/v1/models?limit=1000", "", nil)
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != "http://elsewhere.example/v1/models?limit=1000" {
		t.Fatalf("redirect: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	if res, out := send(t, "POST", srv.URL+"/_sim/faults", `{"redirect_to":"/relative"}`, nil); res.StatusCode != 400 || !strings.Contains(out, "redirect_to") {
		t.Fatalf("relative redirect_to accepted: %d %s", res.StatusCode, out)
	}
}
