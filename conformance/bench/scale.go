package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcSample is what the scale benchmarks read of a running process.
type ProcSample struct {
	RSSKB      int64         // VmRSS
	FDs        int           // open descriptors
	CPU        time.Duration // user + system time so far
	ChildCPU   time.Duration // the same of its waited-for children
	Goroutines int           // go_goroutines from its /metrics (-1: not read)
	// HeapKB and StackKB are the Go runtime's heap and stack in use
	// (go_memstats_heap_inuse_bytes, go_memstats_stack_inuse_bytes).
	HeapKB, StackKB int64
}

// clockTick is the unit of /proc/<pid>/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// ReadProc samples pid from /proc.
func ReadProc(pid int) (ProcSample, error) {
	s := ProcSample{Goroutines: -1}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	if s.RSSKB, err = ParseVmRSS(string(status)); err != nil {
		return s, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.CPU, s.ChildCPU, err = parseStat(string(stat)); err != nil {
		return s, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	return s, nil
}

// ParseVmRSS reads the VmRSS line (in kB) of /proc/<pid>/status.
func ParseVmRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("VmRSS: unexpected %q", strings.TrimSpace(line))
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS in status")
}

// ParseStatCPU reads utime + stime (fields 14 and 15) of /proc/<pid>/stat.
// The command name (field 2) may hold spaces, so fields are counted after
// its closing parenthesis.
func ParseStatCPU(stat string) (time.Duration, error) {
	cpu, _, err := parseStat(stat)
	return cpu, err
}

// parseStat reads utime + stime and cutime + cstime (fields 14 to 17).
func parseStat(stat string) (self, children time.Duration, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 15 {
		return 0, 0, errors.New("stat: too few fields")
	}
	var t [4]int64
	for j := range t {
		if t[j], err = strconv.ParseInt(f[11+j], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("stat: %w", err)
		}
	}
	return time.Duration(t[0]+t[1]) * clockTick, time.Duration(t[2]+t[3]) * clockTick, nil
}

// ParseMetric reads an unlabelled sample from a Prometheus text exposition.
func ParseMetric(metrics, name string) (float64, error) {
	for line := range strings.Lines(metrics) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no %s in the metrics", name)
}

// AddRuntime fills the Go runtime figures of s from a /metrics URL (read
// with a bearer token).
func AddRuntime(s *ProcSample, metricsURL, token string) error {
	text, err := scrape(metricsURL, token)
	if err != nil {
		return err
	}
	g, err1 := ParseMetric(text, "go_goroutines")
	h, err2 := ParseMetric(text, "go_memstats_heap_inuse_bytes")
	st, err3 := ParseMetric(text, "go_memstats_stack_inuse_bytes")
	s.Goroutines, s.HeapKB, s.StackKB = int(g), int64(h)/1024, int64(st)/1024
	return errors.Join(err1, err2, err3)
}

func scrape(metricsURL, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, metricsURL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: status %d", metricsURL, res.StatusCode)
	}
	return string(b), nil
}

// PerStreamKB is the resident memory each of n open streams adds: the
// growth from an idle sample to one taken while all n are open.
func PerStreamKB(idleKB, openKB int64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(openKB-idleKB) / float64(n)
}

// Leaks compares a process before a load and after it ended: more
// goroutines or descriptors than before, beyond tolerance (background work
// that comes and goes), is a leak. It returns one line per leak.
func Leaks(before, after ProcSample, tolGoroutines, tolFDs int) []string {
	var out []string
	if d := after.Goroutines - before.Goroutines; d > tolGoroutines {
		out = append(out, fmt.Sprintf("goroutines %d -> %d (+%d, tolerance %d)", before.Goroutines, after.Goroutines, d, tolGoroutines))
	}
	if d := after.FDs - before.FDs; d > tolFDs {
		out = append(out, fmt.Sprintf("descriptors %d -> %d (+%d, tolerance %d)", before.FDs, after.FDs, d, tolFDs))
	}
	return out
}

// MarginalCost is the cost of one more unit: two runs that differ only in
// how many units (events) they carry, the extra CPU over the extra units.
// It cancels what both runs pay alike (connections, request handling).
func MarginalCost(cpuFew, cpuMany time.Duration, few, many int) (time.Duration, error) {
	if many <= few {
		return 0, fmt.Errorf("the long run must carry more events (%d vs %d)", many, few)
	}
	return (cpuMany - cpuFew) / time.Duration(many-few), nil
}

// SSEResult is what ReadSSE saw of one stream.
type SSEResult struct {
	Events  int  // complete events (ended by a blank line)
	Stopped bool // an event starting with the stop line arrived
	Errored bool // an error event arrived
}

// ReadSSE reads a whole server-sent event stream, calling first once at
// the end of the first event; an event whose first line starts with stop
// (nil: "event: message_stop") marks the stream as stopped.
func ReadSSE(r io.Reader, stop []byte, first func()) (SSEResult, error) {
	if stop == nil {
		stop = []byte("event: message_stop")
	}
	var res SSEResult
	rd := bufio.NewReaderSize(r, 1024)
	inEvent, cont := false, false
	for {
		line, err := rd.ReadSlice('\n')
		if len(line) > 0 {
			blank := !cont && len(bytes.TrimRight(line, "\r\n")) == 0
			switch {
			case !blank:
				if !cont && !inEvent {
					if bytes.HasPrefix(line, stop) {
						res.Stopped = true
					}
					if bytes.HasPrefix(line, []byte("event: error")) {
						res.Errored = true
					}
				}
				inEvent = true
			case inEvent:
				inEvent = false
				res.Events++
				if res.Events == 1 && first != nil {
					first()
				}
			}
		}
		cont = errors.Is(err, bufio.ErrBufferFull)
		if cont {
			continue
		}
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, err
		}
	}
}

// MetMark is the report's word for a target.
func MetMark(met bool) string {
	if met {
		return "met"
	}
	return "**missed**"
}
