package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
)

// fakeResolver answers from a table; answers can change between calls.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]netip.Addr
	calls int
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if a, ok := f.hosts[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (f *fakeResolver) set(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	f.hosts[host] = as
}

func newResolver() *fakeResolver { return &fakeResolver{hosts: map[string][]netip.Addr{}} }

func TestCheckURLRefusesAlways(t *testing.T) {
	t.Parallel()
	r := newResolver()
	r.set("rebind.example", "169.254.169.254")
	r.set("mixed.example", "93.184.215.14", "169.254.10.1")
	// Refused even with private upstreams allowed.
	p := &Policy{AllowPrivate: true, Resolver: r}
	for _, u := range []string{
		"http://169.254.169.254/latest",
		"http://169.254.1.1",
		"http://2852039166/",          // decimal
		"http://0xa9fea9fe/",          // hexadecimal
		"http://0xA9FEA9FE/",          // upper-case hexadecimal
		"http://0251.0376.0251.0376/", // octal
		"http://169.254.43518/",       // two-part form
		"http://0xa9.0xfe.0xa9.0xfe/",
		"http://[::ffff:169.254.169.254]/", // IPv4-mapped IPv6
		"http://[::ffff:a9fe:a9fe]/",
		"http://[64:ff9b::a9fe:a9fe]/", // NAT64
		"http://[::a9fe:a9fe]/",        // IPv4-compatible
		"http://[fd00:ec2::254]/",      // AWS IMDS IPv6
		"http://[fe80::1]/",
		"http://[fe80::1%25eth0]/",
		"http://metadata.google.internal/computeMetadata/v1/",
		"http://METADATA.google.internal./",
		"http://metadata/",
		"http://0.0.0.0:8080/",
		"http://0/",
		"http://[::]/",
		"http://224.0.0.1/",
		"http://255.255.255.255/",
		"http://100.100.100.200/",
		"http://rebind.example/",
		"http://mixed.example/",
		"http://1.2.3.4.5/", // numeric but no address
	} {
		err := p.CheckURL(context.Background(), u)
		if !IsRefused(err) {
			t.Errorf("%s: want refused, got %v", u, err)
			continue
		}
		if strings.Contains(err.Error(), "169.254") || strings.Contains(err.Error(), "metadata.google") {
			t.Errorf("%s: the refusal repeats the destination: %v", u, err)
		}
	}
}

func TestCheckURLPrivateOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	r := newResolver()
	r.set("internal.example", "10.1.2.3")
	r.set("api.example", "93.184.215.14")
	private := []string{
		"http://127.0.0.1:8089", "http://127.1/", "http://[::1]:9/", "http://localhost:80/", "http://a.localhost/",
		"http://10.0.0.1/", "http://172.16.5.4/", "http://192.168.1.1/", "http://100.64.0.1/", "http://[fd12::1]/",
		"http://[::ffff:127.0.0.1]/", "http://2130706433/", "http://internal.example/",
	}
	strict := &Policy{Resolver: r}
	open := &Policy{Resolver: r, AllowPrivate: true}
	r.set("localhost", "127.0.0.1")
	r.set("a.localhost", "127.0.0.1")
	for _, u := range private {
		if err := strict.CheckURL(context.Background(), u); !IsRefused(err) {
			t.Errorf("%s without --allow-private-upstreams: want refused, got %v", u, err)
		}
		if err := open.CheckURL(context.Background(), u); err != nil {
			t.Errorf("%s with --allow-private-upstreams: %v", u, err)
		}
	}
	for _, u := range []string{"https://api.example/v1", "https://93.184.215.14/", "https://unresolvable.example/"} {
		if err := strict.CheckURL(context.Background(), u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestCheckURLRefusesOwnListeners(t *testing.T) {
	t.Parallel()
	p := &Policy{AllowPrivate: true, Resolver: newResolver()}
	p.AddSelf(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 18080})
	p.AddSelf(&net.TCPAddr{IP: net.IPv6zero, Port: 19090}) // a wildcard listener
	for _, u := range []string{"http://127.0.0.1:18080/", "http://[::ffff:127.0.0.1]:18080", "http://127.0.0.1:19090", "http://[::1]:19090/"} {
		if err := p.CheckURL(context.Background(), u); !IsRefused(err) {
			t.Errorf("%s: want refused as the proxy's own listener, got %v", u, err)
		}
	}
	if err := p.CheckURL(context.Background(), "http://127.0.0.1:18081/"); err != nil {
		t.Errorf("another port on loopback: %v", err)
	}
}

func TestInetAton(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"2852039166": "169.254.169.254", "0xa9fea9fe": "169.254.169.254", "0251.0376.0251.0376": "169.254.169.254",
		"169.254.43518": "169.254.169.254", "169.16689662": "169.254.169.254", "127.1": "127.0.0.1", "0": "0.0.0.0",
	} {
		got, ok := inetAton(in)
		if !ok || got.String() != want {
			t.Errorf("inetAton(%q) = %v, %v; want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{"256.1.1.1", "1.2.3.256", "1.16777216", "08", "0x", "1.2.3.4.5", "4294967296"} {
		if _, ok := inetAton(in); ok {
			t.Errorf("inetAton(%q) accepted", in)
		}
	}
}

// A name that resolved to a public address when the upstream was stored and
// to an internal one later is refused when the connection is made: the
// policy resolves again on every dial.
func TestDialReResolves(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	r := newResolver()
	p := &Policy{Resolver: r}
	r.set("up.example", "93.184.215.14")
	if err := p.CheckURL(context.Background(), "http://up.example/"); err != nil {
		t.Fatalf("stored while public: %v", err)
	}
	r.set("up.example", "127.0.0.1")
	c := p.Client(0)
	c.Transport.(*http.Transport).Proxy = nil
	_, err := c.Get("http://up.example:" + strconv.Itoa(port) + "/")
	if !IsRefused(err) {
		t.Fatalf("after the name moved to loopback: want refused at connect, got %v", err)
	}
	// The same server is reachable once private upstreams are allowed,
	// so the refusal above came from the policy, not the network.
	p2 := &Policy{Resolver: r, AllowPrivate: true}
	c2 := p2.Client(0)
	c2.Transport.(*http.Transport).Proxy = nil
	res, err := c2.Get("http://up.example:" + strconv.Itoa(port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
}

// Control guards a dialer that resolves names itself.
func TestControlRefusesResolvedAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &Policy{}
	d := &net.Dialer{Control: p.Control}
	_, err = d.Dial("tcp", ln.Addr().String())
	if !IsRefused(err) {
		t.Fatalf("want refused, got %v", err)
	}
	p.AllowPrivate = true
	p.AddSelf(ln.Addr())
	if _, err = d.Dial("tcp", ln.Addr().String()); !IsRefused(err) {
		t.Fatalf("the proxy's own listener: want refused, got %v", err)
	}
}

func TestErrorDoesNotEchoURL(t *testing.T) {
	t.Parallel()
	p := &Policy{Resolver: newResolver()}
	err := p.CheckURL(context.Background(), "http://user:sk-secret@10.0.0.1/")
	var e *Error
	if !errors.As(err, &e) || strings.Contains(err.Error(), "sk-secret") || strings.Contains(err.Error(), "10.0.0.1") {
		t.Fatalf("got %v", err)
	}
}

// The policy's client is the one the background jobs send credentials
// with: it follows no redirect to another origin.
func TestClientFollowsNoRedirectElsewhere(t *testing.T) {
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer other.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	defer home.Close()
	req, _ := http.NewRequest(http.MethodGet, home.URL, nil)
	req.Header.Set("X-Api-Key", "sk-ant-secret")
	if _, err := (&Policy{AllowPrivate: true}).Client(0).Do(req); !errors.Is(err, credential.ErrRedirectElsewhere) {
		t.Fatalf("err %v, want the refused redirect", err)
	}
	if reached.Load() != 0 {
		t.Fatal("the redirect to another origin was followed")
	}
}
