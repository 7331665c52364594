package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
)

// Candidate is one upstream of a router's upstream table.
type Candidate struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Healthy: enabled with a usable credential (only such are offered).
	Healthy bool `json:"healthy"`
}

// RouteRequest is what a router learns about a request. The strings are
// only read during the call.
type RouteRequest struct {
	PrincipalID, PrincipalName string
	Model                      string
	Stream                     bool
	// The request headers that matter for routing.
	AnthropicBeta, AnthropicVersion, UserAgent string
}

// Refusal refuses the request.
type Refusal struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// MaxTable bounds a binding's upstream table: candidates travel as 16-bit
// indexes.
const MaxTable = 1<<16 - 1

// Binding is a router module bound to one chain entry's config and one
// upstream table (a snapshot's usable upstreams). ABI v2 instances receive
// both once, when they start; a call then sends only the request and the
// indexes of the candidates still in play. Bindings are shared by every
// chain entry with the same module, config and table, and outlive
// snapshots that do not change them. Release it when its holder is gone.
type Binding struct {
	r     *Runtime
	m     *module
	key   string
	setup []byte // the setup document sent to pillar_configure
	table []Candidate
	obs   *slotMetrics
	// hot holds the idle instance a call takes first: one atomic swap
	// instead of a channel's lock each way. pool holds the others.
	hot  atomic.Pointer[instance]
	pool chan *instance

	config json.RawMessage // v1: sent with every call
	refs   int             // guarded by r.mu
	// closed is set, under r.mu, by the last Release; calls read it
	// without the lock.
	closed atomic.Bool
	// refused keeps the guest's refusal of the setup: the same document
	// is refused again, so later calls fail without starting a guest.
	refused atomic.Pointer[error]
}

// routerState is what a v2 router instance keeps between calls.
type routerState struct {
	route api.Function
	// marks validates an answer without allocating: marks[i] == gen when
	// table index i was offered in this call, gen+1 once it was chosen.
	marks []uint32
	gen   uint32
	// configured is set once pillar_configure accepted the setup.
	configured bool
}

// setupDoc is the document pillar_configure receives.
type setupDoc struct {
	ABI       int             `json:"abi"`
	Config    json.RawMessage `json:"config"`
	Upstreams []Candidate     `json:"upstreams"`
}

// BindRouter binds a router module to a chain entry's config and an
// upstream table, or returns the live binding of the same triple. Each
// call takes a reference that Release gives back.
func (r *Runtime) BindRouter(digest string, config json.RawMessage, table []Candidate) (*Binding, error) {
	m := r.module(digest)
	if m == nil {
		return nil, ErrNotLoaded
	}
	if !contains(m.slots, "router") {
		return nil, ErrNoSlot
	}
	if len(table) > MaxTable {
		return nil, fmt.Errorf("%d upstreams: a router binding holds at most %d", len(table), MaxTable)
	}
	if len(config) == 0 {
		config = json.RawMessage("{}")
	}
	setup, err := json.Marshal(setupDoc{ABI: m.abi, Config: config, Upstreams: table})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(setup)
	key := digest + ":" + hex.EncodeToString(sum[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.bindings[key]; b != nil {
		if b.refs == 0 {
			r.retired = slices.DeleteFunc(r.retired, func(x *Binding) bool { return x == b })
		}
		b.refs++
		return b, nil
	}
	b := &Binding{r: r, m: m, key: key, setup: setup, table: append([]Candidate(nil), table...), config: config,
		obs: r.obs["router"], pool: make(chan *instance, r.o.PoolSize-1), refs: 1}
	r.bindings[key] = b
	return b, nil
}

// retiredBindings is how many unreferenced bindings stay warm, each
// with one idle instance: a snapshot rebuilt without changing a router's
// config or table binds it again, and the old snapshot may be collected
// (releasing the binding) first.
const retiredBindings = 4

// Release gives back a reference taken by BindRouter. After the last one
// the binding is retired: it keeps one idle instance until it is bound
// again or, when more bindings retire, closed. Calls still running
// finish normally.
func (b *Binding) Release() {
	r := b.r
	r.mu.Lock()
	b.refs--
	var evicted *Binding
	retired := b.refs == 0
	if retired {
		r.retired = append(r.retired, b)
		if len(r.retired) > retiredBindings {
			evicted = r.retired[0]
			r.retired = r.retired[1:]
			evicted.closed.Store(true)
			delete(r.bindings, evicted.key)
		}
	}
	r.mu.Unlock()
	if retired {
		b.drain(1)
	}
	if evicted != nil {
		evicted.drain(0)
	}
}

// drain closes idle instances until keep are left.
func (b *Binding) drain(keep int) {
	if keep == 0 {
		if in := b.hot.Swap(nil); in != nil {
			in.close()
		}
	} else if b.hot.Load() != nil {
		keep--
	}
	for len(b.pool) > keep {
		select {
		case in := <-b.pool:
			in.close()
		default:
			return
		}
	}
}

// Table is the binding's upstream table.
func (b *Binding) Table() []Candidate { return b.table }

// Warm starts one more instance into the pool (when it has room), so a
// call does not pay for the guest runtime's start.
func (b *Binding) Warm(ctx context.Context) error {
	if b.m.abi != 2 {
		return nil
	}
	in, err := b.start(ctx)
	if err != nil {
		return err
	}
	b.put(in)
	return nil
}

// Route asks the router to choose among cands (indexes into the table, in
// order). It appends the chosen indexes, in the router's order, to
// dst[:0] and returns them, or returns a refusal. Its answer must name only
// offered candidates, each at most once; anything else is garbage. On the
// ABI v2 path a call allocates nothing when dst has room.
func (b *Binding) Route(ctx context.Context, req *RouteRequest, cands, dst []uint16) (_ []uint16, _ *Refusal, err error) {
	if b.m.abi == 1 {
		defer b.obs.observe(sinceEpoch(), &err)
		return b.routeV1(ctx, req, cands, dst)
	}
	defer b.obs.count(&err)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if e := b.refused.Load(); e != nil {
		return nil, nil, *e
	}
	in, err := b.instance(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The duration is sampled (timedEvery): two clock reads were a third
	// of a metered call.
	timed := in.timed()
	var start time.Duration
	if timed {
		start = sinceEpoch()
	}
	dst, ref, err := b.call(in, req, cands, dst[:0])
	if timed {
		b.obs.dur.Observe((sinceEpoch() - start).Seconds())
	}
	if err != nil {
		// A failed instance may be in any state: never reuse it.
		in.close()
		return nil, nil, err
	}
	b.put(in)
	return dst, ref, nil
}

func (b *Binding) instance(ctx context.Context) (*instance, error) {
	if in := b.hot.Swap(nil); in != nil {
		return in, nil
	}
	select {
	case in := <-b.pool:
		return in, nil
	default:
	}
	return b.start(ctx)
}

// start instantiates and configures an instance.
func (b *Binding) start(ctx context.Context) (*instance, error) {
	in, err := b.r.instantiate(ctx, b.m)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTrap, err)
	}
	if err := b.configure(in); err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

func (b *Binding) put(in *instance) {
	if !b.closed.Load() {
		if b.hot.CompareAndSwap(nil, in) {
			// A Release that drained the binding meanwhile missed this one.
			if b.closed.Load() {
				b.drain(0)
			}
			return
		}
		select {
		case b.pool <- in:
			// A Release that drained the pool meanwhile missed this one.
			if b.closed.Load() {
				b.drain(0)
			}
			return
		default:
		}
	}
	in.close()
}

// configure delivers the setup document to a fresh instance.
func (b *Binding) configure(in *instance) error {
	t := b.r.o.CallTimeout
	buf, err := in.buffer(len(b.setup), t)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	copy(buf, b.setup)
	in.stack[0] = uint64(len(b.setup))
	if err := in.run(in.mod.ExportedFunction(ExportConfigure), t); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if res := in.stack[0]; res != 0 {
		msg, err := in.answer(res, 4096)
		if err != nil {
			return fmt.Errorf("configure: %w", err)
		}
		err = fmt.Errorf("%w: %s", ErrConfig, msg)
		b.refused.Store(&err)
		return err
	}
	in.router = routerState{route: in.mod.ExportedFunction(ExportRoute), marks: make([]uint32, len(b.table)), configured: true}
	return nil
}

// The ABI v2 route record (docs/plugins.md), little-endian: a header of
// u32 flags, u32 candidate count and six u32 string lengths, then the
// candidates as u16 table indexes, then the strings.
const (
	recHeader    = 32
	flagStream   = 1
	answerChoose = 0
	answerRefuse = 1
)

func (b *Binding) call(in *instance, req *RouteRequest, cands, dst []uint16) ([]uint16, *Refusal, error) {
	t := b.r.o.CallTimeout
	st := &in.router
	n := recHeader + 2*len(cands) + len(req.PrincipalID) + len(req.PrincipalName) + len(req.Model) +
		len(req.AnthropicBeta) + len(req.AnthropicVersion) + len(req.UserAgent)
	rec, err := in.buffer(n, t)
	if err != nil {
		return nil, nil, err
	}
	// Offered candidates are marked with this call's generation; gen+1
	// marks a chosen one. Two steps per call never collide with a stale
	// mark until the counter wraps, when the marks are cleared.
	st.gen += 2
	if st.gen < 2 {
		clear(st.marks)
		st.gen = 2
	}
	var flags uint32
	if req.Stream {
		flags |= flagStream
	}
	le := binary.LittleEndian
	le.PutUint32(rec[0:], flags)
	le.PutUint32(rec[4:], uint32(len(cands)))
	le.PutUint32(rec[8:], uint32(len(req.PrincipalID)))
	le.PutUint32(rec[12:], uint32(len(req.PrincipalName)))
	le.PutUint32(rec[16:], uint32(len(req.Model)))
	le.PutUint32(rec[20:], uint32(len(req.AnthropicBeta)))
	le.PutUint32(rec[24:], uint32(len(req.AnthropicVersion)))
	le.PutUint32(rec[28:], uint32(len(req.UserAgent)))
	off := recHeader
	for _, c := range cands {
		if int(c) >= len(st.marks) {
			return nil, nil, fmt.Errorf("candidate %d is not in the upstream table of %d", c, len(st.marks))
		}
		st.marks[c] = st.gen
		le.PutUint16(rec[off:], c)
		off += 2
	}
	off += copy(rec[off:], req.PrincipalID)
	off += copy(rec[off:], req.PrincipalName)
	off += copy(rec[off:], req.Model)
	off += copy(rec[off:], req.AnthropicBeta)
	off += copy(rec[off:], req.AnthropicVersion)
	copy(rec[off:], req.UserAgent)

	in.stack[0] = uint64(n)
	if err := in.run(st.route, t); err != nil {
		return nil, nil, err
	}
	ans, err := in.answer(in.stack[0], b.r.o.MaxOutputBytes)
	if err != nil {
		return nil, nil, err
	}
	if len(ans) < 4 {
		return nil, nil, fmt.Errorf("%w: answer of %d bytes", ErrGarbage, len(ans))
	}
	switch le.Uint16(ans) {
	case answerChoose:
		k := int(le.Uint16(ans[2:]))
		if len(ans) != 4+2*k {
			return nil, nil, fmt.Errorf("%w: a choice of %d in %d bytes", ErrGarbage, k, len(ans))
		}
		for i := range k {
			c := le.Uint16(ans[4+2*i:])
			if int(c) >= len(st.marks) || st.marks[c] != st.gen {
				return nil, nil, fmt.Errorf("%w: upstream #%d was not offered or is named twice", ErrGarbage, c)
			}
			st.marks[c] = st.gen + 1
			dst = append(dst, c)
		}
		return dst, nil, nil
	case answerRefuse:
		if len(ans) < 8 {
			return nil, nil, fmt.Errorf("%w: a refusal of %d bytes", ErrGarbage, len(ans))
		}
		status, tl, ml := int(le.Uint16(ans[2:])), int(le.Uint16(ans[4:])), int(le.Uint16(ans[6:]))
		if len(ans) != 8+tl+ml {
			return nil, nil, fmt.Errorf("%w: a refusal's lengths do not add up", ErrGarbage)
		}
		ref, err := refusal(status, string(ans[8:8+tl]), string(ans[8+tl:]))
		return nil, ref, err
	}
	return nil, nil, fmt.Errorf("%w: answer kind %d", ErrGarbage, le.Uint16(ans))
}

// refusal applies a refusal's defaults and checks its status.
func refusal(status int, typ, msg string) (*Refusal, error) {
	if status == 0 {
		status = 403
	}
	if status < 400 || status > 599 {
		return nil, fmt.Errorf("%w: refusal status %d", ErrGarbage, status)
	}
	if typ == "" {
		typ = proxyerr.TypePermission
	}
	if msg == "" {
		msg = "refused by a routing plugin"
	}
	return &Refusal{Status: status, Type: typ, Message: msg}, nil
}

// idle counts the idle instances (tests).
func (b *Binding) idle() int {
	n := len(b.pool)
	if b.hot.Load() != nil {
		n++
	}
	return n
}
