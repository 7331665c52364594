package bench

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Micro is one benchmark from `go test -bench -benchmem` output, over all
// the runs -count asked for.
type Micro struct {
	Name   string
	NsOp   []float64 // one per run
	BOp    float64   // from the last run: allocation figures do not drift
	Allocs float64
	Extra  string // other metrics of the last run, e.g. "1650.79 MB/s"
}

// Median is the median ns/op: one slow run on a busy machine does not move it.
func (m Micro) Median() float64 {
	s := slices.Clone(m.NsOp)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ParseMicro reads benchmark result lines, keeping the order in which each
// benchmark first appears; other lines are skipped.
func ParseMicro(r io.Reader) ([]Micro, error) {
	var out []Micro
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // not a result line
		}
		i, ok := index[f[0]]
		if !ok {
			i = len(out)
			index[f[0]] = i
			out = append(out, Micro{Name: f[0]})
		}
		m := &out[i]
		var extra []string
		for j := 2; j+1 < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %q: %w", f[0], f[j], err)
			}
			switch f[j+1] {
			case "ns/op":
				m.NsOp = append(m.NsOp, v)
			case "B/op":
				m.BOp = v
			case "allocs/op":
				m.Allocs = v
			default:
				extra = append(extra, f[j]+" "+f[j+1])
			}
		}
		m.Extra = strings.Join(extra, ", ")
	}
	return out, sc.Err()
}

// MicroTable renders benchmarks as a markdown table of median ns/op, B/op
// and allocs/op. A benchmark with "/gateway/" in its name also gets its
// ratio to the one named the same with "/bare/".
func MicroTable(ms []Micro) string {
	byName := map[string]Micro{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	var b strings.Builder
	b.WriteString("| benchmark | runs | ns/op (median) | B/op | allocs/op | gateway ÷ bare (ns/op) | other |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, m := range ms {
		ratio := ""
		if strings.Contains(m.Name, "/gateway/") {
			if bare, ok := byName[strings.Replace(m.Name, "/gateway/", "/bare/", 1)]; ok && bare.Median() > 0 {
				ratio = fmt.Sprintf("%.2fx", m.Median()/bare.Median())
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.0f | %s | %s |\n",
			strings.TrimPrefix(m.Name, "Benchmark"), len(m.NsOp), m.Median(), m.BOp, m.Allocs, ratio, m.Extra)
	}
	return b.String()
}
