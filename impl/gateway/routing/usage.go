package routing

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// usageWindow is one polled usage window of an upstream, read on the
// request path without a lock.
type usageWindow struct {
	percent atomic.Int64 // float64 bits of the utilisation in percent
	resets  atomic.Int64 // unix nanoseconds of the window's reset; 0: unknown
}

func (w *usageWindow) set(q store.QuotaWindow) {
	w.percent.Store(int64(math.Float64bits(q.Utilization)))
	var r int64
	if q.ResetsAt != nil {
		r = q.ResetsAt.UnixNano()
	}
	w.resets.Store(r)
}

// at is the window's utilisation at now: 0 once it has reset.
func (w *usageWindow) at(now time.Time) float64 {
	if r := w.resets.Load(); r != 0 && r <= now.UnixNano() {
		return 0
	}
	return math.Float64frombits(uint64(w.percent.Load()))
}

// SetUsage records an upstream's polled usage windows.
func (b *Board) SetUsage(id string, w store.QuotaWindows) {
	if b == nil {
		return
	}
	s := b.State(id)
	s.fiveHour.set(w.FiveHour)
	s.sevenDay.set(w.SevenDay)
}

// Utilization is id's polled 5-hour and 7-day utilisation at now, in
// percent (0 when unknown or reset since the poll).
func (b *Board) Utilization(id string, now time.Time) (fiveHour, sevenDay float64) {
	s := b.lookup(id)
	if s == nil {
		return 0, 0
	}
	return s.fiveHour.at(now), s.sevenDay.at(now)
}

// OverThreshold reports whether id's polled utilisation at now reaches
// either threshold (percent; 0 is none). Such an upstream takes new work
// only when no other upstream of its class can.
func (b *Board) OverThreshold(id string, max5h, max7d int, now time.Time) bool {
	if max5h <= 0 && max7d <= 0 {
		return false
	}
	five, seven := b.Utilization(id, now)
	return max5h > 0 && five >= float64(max5h) || max7d > 0 && seven >= float64(max7d)
}
