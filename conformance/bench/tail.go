package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// A Window is one measured request, in wall-clock time.
type Window struct{ Start, End time.Time }

// Windows are the requests of samples at the given rounds (all rounds when
// rounds is nil).
func Windows(s []Sample, rounds []int) []Window {
	if rounds == nil {
		rounds = make([]int, len(s))
		for i := range rounds {
			rounds[i] = i
		}
	}
	out := make([]Window, len(rounds))
	for i, r := range rounds {
		out[i] = Window{s[r].Start, s[r].Start.Add(s[r].D)}
	}
	return out
}

// The activities a request window can overlap in the gateway's execution
// trace: the garbage collector's phases, and the running time of the
// goroutines beside the request path, by role.
const (
	ActGCMark     = "GC mark phase"
	ActSTW        = "stop-the-world"
	ActUsage      = "usage recorder (request events: extract, SQLite write)"
	ActLimits     = "limits sync"
	ActScheduler  = "durable scheduler"
	ActSnapshot   = "snapshot reconciler / refresh"
	ActOther      = "other goroutines"
	ActRunnable   = "request goroutines runnable, waiting for a P"
	ActNone       = "none of these (outside the gateway process)"
	roleRequest   = "request"
	minAttributed = 20 * time.Microsecond // less overlap than this is not a cause
)

// roles maps a function in a goroutine's stack to what the goroutine is;
// the first match in this order wins.
var roles = []struct{ fn, role string }{
	{"usage.(*Recorder)", ActUsage},
	{"limits.(*Limiter)", ActLimits},
	{"scheduler.", ActScheduler},
	{"riverqueue", ActScheduler},
	{"snapshot.(*Runtime)", ActSnapshot},
	{"net/http.(*conn).serve", roleRequest},
	{"net/http.(*persistConn)", roleRequest},
	{"relay.(*Handler)", roleRequest},
}

// TailBreakdown is, for a set of request windows, how many overlapped each
// activity by at least minAttributed, and which activity overlapped each
// the most (its likeliest cause).
type TailBreakdown struct {
	Windows  int
	Overlaps map[string]int // windows overlapping the activity
	Dominant map[string]int // windows whose largest overlap is the activity
	Overlap  map[string]time.Duration
}

type interval struct{ a, b time.Time }

// AnalyzeTrace reads a Go execution trace of the gateway and breaks down
// each group of windows (e.g. the slowest 1% and all requests) by the
// activities it overlapped. Trace times are converted to wall-clock time
// through the trace's clock snapshots (Go 1.25+).
func AnalyzeTrace(r io.Reader, groups ...[]Window) ([]TailBreakdown, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	acts := map[string][]interval{}
	var (
		snap     *trace.ClockSnapshot
		gcStart  = map[string]time.Time{}
		running  = map[trace.GoID]time.Time{}
		runnable = map[trace.GoID]time.Time{}
		role     = map[trace.GoID]string{}
		startFn  = map[trace.GoID]string{}     // where a goroutine began, for the "other" ones
		spans    = map[trace.GoID][]interval{} // running, until the role is known
		waits    = map[trace.GoID][]interval{} // runnable
	)
	wall := func(t trace.Time) time.Time {
		if snap == nil {
			return time.Time{}
		}
		return snap.Wall.Add(time.Duration(t - snap.Trace))
	}
	learn := func(g trace.GoID, st trace.Stack) {
		if role[g] != "" {
			return
		}
		for f := range st.Frames() {
			for _, r := range roles {
				if strings.Contains(f.Func, r.fn) {
					role[g] = r.role
					return
				}
			}
		}
	}
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		now := wall(ev.Time())
		switch ev.Kind() {
		case trace.EventSync:
			if cs := ev.Sync().ClockSnapshot; cs != nil {
				snap = cs
			}
		case trace.EventRangeBegin, trace.EventRangeEnd:
			name := ev.Range().Name
			act := ""
			switch {
			case name == "GC concurrent mark phase":
				act = ActGCMark
			case strings.HasPrefix(name, "stop-the-world"):
				act = ActSTW
			default:
				continue
			}
			if ev.Kind() == trace.EventRangeBegin {
				gcStart[act] = now
			} else if t, ok := gcStart[act]; ok && !t.IsZero() {
				acts[act] = append(acts[act], interval{t, now})
				delete(gcStart, act)
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			// The transitioning goroutine's own stack (where it blocked, or
			// where it starts), never the event's: that is whoever woke it.
			learn(g, st.Stack)
			if from == trace.GoNotExist || startFn[g] == "" {
				for f := range st.Stack.Frames() {
					startFn[g] = f.Func // the outermost frame: the goroutine's function
				}
			}
			if from == trace.GoRunning && ev.Goroutine() == g {
				learn(g, ev.Stack())
			}
			if from == trace.GoRunning {
				if t, ok := running[g]; ok && !t.IsZero() && !now.IsZero() {
					spans[g] = append(spans[g], interval{t, now})
				}
				delete(running, g)
			}
			if from == trace.GoRunnable {
				if t, ok := runnable[g]; ok && !t.IsZero() && !now.IsZero() {
					waits[g] = append(waits[g], interval{t, now})
				}
				delete(runnable, g)
			}
			switch to {
			case trace.GoRunning:
				running[g] = now
			case trace.GoRunnable:
				runnable[g] = now
			}
		}
	}
	for g, ss := range spans {
		r := role[g]
		switch r {
		case roleRequest:
			acts[ActRunnable] = append(acts[ActRunnable], waits[g]...)
			continue
		case "":
			r = ActOther
			if fn := startFn[g]; fn != "" {
				r = OtherPrefix + fn
			}
		}
		acts[r] = append(acts[r], ss...)
	}
	for k := range acts {
		slices.SortFunc(acts[k], func(x, y interval) int { return x.a.Compare(y.a) })
	}
	if snap == nil {
		return nil, fmt.Errorf("the trace has no clock snapshot (needs a Go 1.25+ trace)")
	}
	out := make([]TailBreakdown, len(groups))
	for i, ws := range groups {
		b := TailBreakdown{Windows: len(ws), Overlaps: map[string]int{}, Dominant: map[string]int{}, Overlap: map[string]time.Duration{}}
		for _, w := range ws {
			best, bestD := ActNone, time.Duration(0)
			for act, iv := range acts {
				d := overlap(iv, w)
				if d < minAttributed {
					continue
				}
				b.Overlaps[act]++
				b.Overlap[act] += d
				if d > bestD {
					best, bestD = act, d
				}
			}
			b.Dominant[best]++
		}
		out[i] = b
	}
	return out, nil
}

// overlap is how much of w the sorted intervals iv cover.
func overlap(iv []interval, w Window) time.Duration {
	i, _ := slices.BinarySearchFunc(iv, w.Start, func(x interval, t time.Time) int { return x.a.Compare(t) })
	i = max(0, i-64) // an earlier interval may still reach into w
	var d time.Duration
	for ; i < len(iv) && iv[i].a.Before(w.End); i++ {
		a, b := iv[i].a, iv[i].b
		if a.Before(w.Start) {
			a = w.Start
		}
		if b.After(w.End) {
			b = w.End
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

// OtherPrefix starts the activity name of a goroutine of no known role:
// its function follows.
const OtherPrefix = "other: "

// TailActivities lists the activities in the order the tail table shows them.
var TailActivities = []string{ActGCMark, ActSTW, ActUsage, ActLimits, ActScheduler, ActSnapshot, ActOther, ActRunnable, ActNone}

// TailTable renders the breakdown of the slowest requests beside that of
// all requests: the share overlapping each activity, and the share for
// which it was the largest overlap.
func TailTable(slow, all TailBreakdown) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| activity in the gateway during the request | slowest 1%% (%d): overlapped | its largest overlap | all requests (%d): overlapped | its largest overlap | mean overlap, slowest |\n", slow.Windows, all.Windows)
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	pct := func(n, of int) string {
		if of == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
	}
	acts := slices.Clone(TailActivities)
	var others []string
	for a := range slow.Overlaps {
		if strings.HasPrefix(a, OtherPrefix) {
			others = append(others, a)
		}
	}
	slices.SortFunc(others, func(x, y string) int {
		if c := slow.Overlaps[y] - slow.Overlaps[x]; c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	// The "other" goroutines seen in the slowest requests, by function,
	// in place of the catch-all row.
	i := slices.Index(acts, ActOther)
	acts = slices.Replace(acts, i, i+1, others[:min(len(others), 8)]...)
	for _, a := range acts {
		mean := "—"
		if n := slow.Overlaps[a]; n > 0 {
			mean = fmt.Sprintf("%.0f µs", Micros(slow.Overlap[a]/time.Duration(n)))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", a, pct(slow.Overlaps[a], slow.Windows), pct(slow.Dominant[a], slow.Windows),
			pct(all.Overlaps[a], all.Windows), pct(all.Dominant[a], all.Windows), mean)
	}
	return b.String()
}
