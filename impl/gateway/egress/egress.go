// Package egress is the destination policy of the gateway's outbound
// requests to upstreams: which addresses an upstream's base_url (or an
// OAuth token endpoint) may reach. It is checked twice: when the admin API
// stores a location (CheckURL) and on every connection, after the name is
// resolved (DialContext, Control), because a DNS answer can change between
// the two.
//
// Always refused: unspecified, link-local, multicast and broadcast
// addresses, the cloud metadata endpoints in any spelling, and the proxy's
// own listeners. Refused unless the operator allows private upstreams:
// loopback, RFC 1918, unique-local (fc00::/7) and shared (100.64.0.0/10)
// addresses.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
)

// Resolver looks names up; *net.Resolver implements it. Tests inject one to
// make a name resolve differently at connect time than at create time.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Policy decides which destinations outbound requests may reach. The zero
// value refuses private ranges and knows no listener of its own.
type Policy struct {
	// AllowPrivate admits loopback and private ranges (simulators, tests,
	// upstreams inside the operator's network).
	AllowPrivate bool
	// Resolver resolves names (default net.DefaultResolver).
	Resolver Resolver
	// DialTimeout bounds one connection attempt (default 10s).
	DialTimeout time.Duration

	mu    sync.RWMutex
	self  []netip.AddrPort
	local map[netip.Addr]bool
}

// Error is a refused destination. Its message names the reason, never the
// URL (which may carry a credential) and never a resolved address list.
type Error struct{ Reason string }

func (e *Error) Error() string { return "destination not allowed: " + e.Reason }

// IsRefused reports whether err (or an error it wraps) is a policy refusal.
func IsRefused(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func refuse(format string, a ...any) error { return &Error{Reason: fmt.Sprintf(format, a...)} }

// AddSelf records a listener of this process: connections to it are refused
// (a request looping through the proxy itself). A wildcard listener stands
// for every address of this host on its port.
func (p *Policy) AddSelf(addr net.Addr) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.self = append(p.self, ap)
	if ap.Addr().IsUnspecified() && p.local == nil {
		p.local = map[netip.Addr]bool{}
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if pfx, err := netip.ParsePrefix(a.String()); err == nil {
					p.local[pfx.Addr().Unmap()] = true
				}
			}
		}
	}
}

func (p *Policy) isSelf(ip netip.Addr, port uint16) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, s := range p.self {
		if s.Port() != port {
			continue
		}
		if s.Addr() == ip || (s.Addr().IsUnspecified() && (ip.IsLoopback() || p.local[ip])) {
			return true
		}
	}
	return false
}

var (
	// Metadata endpoints outside the link-local range, refused always.
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
	}
	// Metadata host names, refused before any lookup.
	metadataNames = map[string]bool{
		"metadata": true, "metadata.google.internal": true, "metadata.goog": true,
		"instance-data": true, "instance-data.ec2.internal": true,
	}
	privatePrefixes = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"), // shared address space (CGNAT)
		netip.MustParsePrefix("fc00::/7"),
		netip.MustParsePrefix("fec0::/10"), // deprecated site-local
	}
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	compatV4    = netip.MustParsePrefix("::/96")
	broadcast   = netip.MustParseAddr("255.255.255.255")
)

// embeddedV4 returns the IPv4 address an IPv6 address carries (mapped,
// NAT64 well-known prefix, IPv4-compatible), so 169.254.169.254 cannot be
// reached through an IPv6 spelling of it.
func embeddedV4(ip netip.Addr) netip.Addr {
	ip = ip.WithZone("").Unmap()
	if ip.Is6() && (nat64.Contains(ip) || (compatV4.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback())) {
		b := ip.As16()
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return ip
}

// CheckIP decides one resolved destination.
func (p *Policy) CheckIP(ip netip.Addr, port uint16) error {
	ip = embeddedV4(ip)
	switch {
	case !ip.IsValid():
		return refuse("not an IP address")
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return refuse("an unspecified address")
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return refuse("a link-local address (cloud metadata lives there)")
	case ip.IsMulticast() || ip == broadcast:
		return refuse("a multicast or broadcast address")
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return refuse("a cloud metadata address")
		}
	}
	if p.isSelf(ip, port) {
		return refuse("one of this proxy's own listeners")
	}
	if p.AllowPrivate {
		return nil
	}
	if ip.IsLoopback() {
		return refuse("a loopback address (start the proxy with --allow-private-upstreams to allow it)")
	}
	for _, pfx := range privatePrefixes {
		if pfx.Contains(ip) {
			return refuse("a private address (start the proxy with --allow-private-upstreams to allow it)")
		}
	}
	return nil
}

// parseHost reads a host as an IP address in any spelling a resolver
// accepts: IPv6 (with or without zone) and the inet_aton forms of IPv4
// (2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518). ok is
// false for a host that is a name.
func parseHost(host string) (ip netip.Addr, numeric, ok bool) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true, true
	}
	for _, part := range strings.Split(host, ".") {
		hex, isHex := strings.CutPrefix(part, "0x")
		digits := "0123456789"
		if isHex {
			digits, part = "0123456789abcdef", hex
		}
		if strings.Trim(part, digits) != "" || (!isHex && part == "") {
			return netip.Addr{}, false, false // a label of a name
		}
	}
	a, ok := inetAton(host)
	return a, true, ok
}

// inetAton parses the historical IPv4 forms: one to four parts, each
// decimal, octal (leading 0) or hexadecimal (0x); the last part fills the
// remaining bytes.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, part := range parts {
		base := 10
		switch {
		case strings.HasPrefix(part, "0x"):
			base, part = 16, part[2:]
		case len(part) > 1 && part[0] == '0':
			base, part = 8, part[1:]
		}
		v, err := strconv.ParseUint(part, base, 32)
		if err != nil || part == "" {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	last := len(vals) - 1
	for i := 0; i < last; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
		n |= vals[i] << (24 - 8*i)
	}
	if vals[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	n |= vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

func (p *Policy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// checkHost decides a host (name or address) on a port. lookupErrOK says
// what a failed lookup means: at create time the connect-time check still
// guards (a DNS outage must not block configuration); at connect time a
// failed lookup is the dial's own error.
func (p *Policy) checkHost(ctx context.Context, host string, port uint16) ([]netip.Addr, error) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, numeric, ok := parseHost(host); numeric {
		if !ok {
			return nil, refuse("the host is neither a name nor a valid address")
		}
		return []netip.Addr{ip}, p.CheckIP(ip, port)
	}
	if metadataNames[host] {
		return nil, refuse("a cloud metadata host name")
	}
	if (host == "localhost" || strings.HasSuffix(host, ".localhost")) && !p.AllowPrivate {
		return nil, refuse("a loopback name (start the proxy with --allow-private-upstreams to allow it)")
	}
	ips, err := p.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		// One refused answer refuses the name: a name that mixes public
		// and internal addresses is a rebinding attempt or a mistake.
		if err := p.CheckIP(ip, port); err != nil {
			return nil, err
		}
	}
	return ips, nil
}

// CheckURL decides a location when it is stored: its host in every
// spelling, and the addresses its name resolves to now. A name that does
// not resolve is accepted: DialContext checks again on every connection.
func (p *Policy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return refuse("the URL has no host")
	}
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil {
			return refuse("the port is not a number from 0 to 65535")
		}
		port = uint16(n)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = p.checkHost(ctx, u.Hostname(), port)
	if err != nil && !IsRefused(err) {
		return nil
	}
	return err
}

// Control is a net.Dialer Control function: it refuses a connection whose
// resolved address the policy does not allow. It runs for every address a
// dialer tries, after resolution, so it holds even for a dialer that
// resolves names itself.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refuse("cannot read the dialed address")
	}
	return p.CheckIP(ap.Addr(), ap.Port())
}

// DialContext resolves the host with the policy's resolver, refuses the
// connection when any answer is not allowed, and dials the allowed
// addresses in turn (Control checks each once more).
func (p *Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, ps, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port", network)
	}
	ips, err := p.checkHost(ctx, host, uint16(n))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", network, err)
	}
	timeout := p.DialTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
	var first error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.String(), ps))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("dial %s: no address for the host", network)
	}
	return nil, first
}

// Transport returns a transport like http.DefaultTransport that dials
// through the policy.
func (p *Policy) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = p.DialContext
	return t
}

// Client returns an HTTP client that dials through the policy and follows
// no redirect to another origin (credential.CheckRedirect): its callers
// send upstream credentials.
func (p *Policy) Client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: p.Transport(), CheckRedirect: credential.CheckRedirect}
}
