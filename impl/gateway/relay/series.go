package relay

import (
	"math"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// requestSeries are the series every request updates: its count by status
// code and the two latency histograms. They are kept in shards, one per
// processor as far as a sync.Pool can tell (it hands each P the shard it
// used last), and summed when scraped: on one shared set of counters every
// request's atomic adds pull the same cache lines from the other cores.
type requestSeries struct {
	shards []seriesShard
	hint   sync.Pool // *seriesShard, the one this P used last
	next   atomic.Uint32

	// slot maps a tracked status code to its counter in a shard, plus one;
	// 0: not tracked, counted on other instead. Read-only after creation.
	slot  [600]uint8
	codes []string // tracked codes by slot, as labels
	other *prometheus.CounterVec

	reqDesc, durDesc, ttfbDesc *prometheus.Desc
	durBounds, ttfbBounds      []float64
}

// trackedCodes are the statuses the proxy path answers with most; their
// series exist from the start, at zero. Others are counted on a vector,
// resolved per request.
var trackedCodes = [...]int{200, 400, 401, 403, 404, 413, 429, 500, 502, 503, 529}

// histBuckets is the number of upper bounds of each histogram (the +Inf
// bucket is one more).
const histBuckets = 14

type seriesShard struct {
	codes     [len(trackedCodes)]atomic.Uint64
	dur, ttfb histShard
	// Pads the shard's last line off the next shard's first.
	_ [64]byte
}

// histShard holds per-bucket (not cumulative) counts, so an observation is
// one add and the count is their sum: a scrape never sees a count that
// disagrees with the buckets.
type histShard struct {
	buckets [histBuckets + 1]atomic.Uint64
	sumBits atomic.Uint64
}

func (h *histShard) observe(bounds []float64, v float64) {
	// The first bound >= v: buckets are inclusive of their upper bound,
	// as Prometheus' own histogram has them.
	h.buckets[sort.SearchFloat64s(bounds, v)].Add(1)
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func newRequestSeries(durHelp, ttfbHelp string, durBounds, ttfbBounds []float64) *requestSeries {
	if len(durBounds) != histBuckets || len(ttfbBounds) != histBuckets {
		panic("relay: histogram bounds and histBuckets disagree")
	}
	const reqName, reqHelp = "svc_proxy_requests_total", "Requests on the proxy path by HTTP status code."
	s := &requestSeries{
		// Twice the processors: a P whose hint the GC dropped takes the
		// next shard in turn, and is unlikely to meet another P's.
		shards:     make([]seriesShard, 2*runtime.GOMAXPROCS(0)),
		other:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: reqName, Help: reqHelp}, []string{"code"}),
		reqDesc:    prometheus.NewDesc(reqName, reqHelp, []string{"code"}, nil),
		durDesc:    prometheus.NewDesc("svc_proxy_request_duration_seconds", durHelp, nil, nil),
		ttfbDesc:   prometheus.NewDesc("svc_proxy_time_to_first_byte_seconds", ttfbHelp, nil, nil),
		durBounds:  durBounds,
		ttfbBounds: ttfbBounds,
	}
	for i, c := range trackedCodes {
		s.slot[c] = uint8(i + 1)
		s.codes = append(s.codes, strconv.Itoa(c))
	}
	s.hint.New = func() any { return &s.shards[int(s.next.Add(1)-1)%len(s.shards)] }
	return s
}

// request counts an answer with code and, when took > 0, its duration.
func (s *requestSeries) request(code int, took float64) {
	if code <= 0 || code >= len(s.slot) {
		code = 0
	}
	sh := s.hint.Get().(*seriesShard)
	if i := s.slot[code]; i != 0 {
		sh.codes[i-1].Add(1)
	} else {
		s.other.WithLabelValues(strconv.Itoa(code)).Inc()
	}
	if took > 0 {
		sh.dur.observe(s.durBounds, took)
	}
	s.hint.Put(sh)
}

// firstByte observes a time to first byte.
func (s *requestSeries) firstByte(d float64) {
	sh := s.hint.Get().(*seriesShard)
	sh.ttfb.observe(s.ttfbBounds, d)
	s.hint.Put(sh)
}

func (s *requestSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.reqDesc
	ch <- s.durDesc
	ch <- s.ttfbDesc
}

func (s *requestSeries) Collect(ch chan<- prometheus.Metric) {
	var codes [len(trackedCodes)]uint64
	var dur, ttfb histSum
	for i := range s.shards {
		sh := &s.shards[i]
		for j := range codes {
			codes[j] += sh.codes[j].Load()
		}
		dur.add(&sh.dur)
		ttfb.add(&sh.ttfb)
	}
	for j, n := range codes {
		ch <- prometheus.MustNewConstMetric(s.reqDesc, prometheus.CounterValue, float64(n), s.codes[j])
	}
	s.other.Collect(ch)
	ch <- dur.metric(s.durDesc, s.durBounds)
	ch <- ttfb.metric(s.ttfbDesc, s.ttfbBounds)
}

// histSum is the shards of a histogram added up.
type histSum struct {
	buckets [histBuckets + 1]uint64
	sum     float64
}

func (h *histSum) add(sh *histShard) {
	for i := range h.buckets {
		h.buckets[i] += sh.buckets[i].Load()
	}
	h.sum += math.Float64frombits(sh.sumBits.Load())
}

func (h *histSum) metric(d *prometheus.Desc, bounds []float64) prometheus.Metric {
	cum := make(map[float64]uint64, len(bounds))
	var n uint64
	for i, b := range bounds {
		n += h.buckets[i]
		cum[b] = n
	}
	n += h.buckets[len(bounds)]
	return prometheus.MustNewConstHistogram(d, n, h.sum, cum)
}
