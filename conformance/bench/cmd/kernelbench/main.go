// Command kernelbench turns the PILLAR-BENCH lines the qemu guest's tests
// print (conformance/kernel/guest, make e2e-kernel) into a markdown table
// for docs/benchmarks.md: one row per operation and case, with the number
// of calls, the median and the longest.
//
//	kernelbench [console.log] >fragment.md
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/pillarhq/pillar/conformance/bench"
)

func main() { bench.Main("kernelbench", run) }

func run(_ context.Context, args []string) error {
	in := io.Reader(os.Stdin)
	if len(args) > 0 {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	rows, err := parse(in)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return errors.New("no PILLAR-BENCH lines (run make e2e-kernel first)")
	}
	fmt.Print(table(rows))
	return nil
}

// row is one operation on one case and its durations in milliseconds.
type row struct {
	op, what string
	ms       []float64
}

// parse reads "PILLAR-BENCH <op> <case> <n>ms" lines, anywhere in a line
// (the serial console may prefix or interleave kernel messages) and with
// the console's carriage returns.
func parse(r io.Reader) ([]*row, error) {
	byKey := map[string]*row{}
	var order []*row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		i := strings.Index(line, "PILLAR-BENCH ")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i:])
		if len(f) != 4 || !strings.HasSuffix(f[3], "ms") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(f[3], "ms"), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			continue
		}
		key := f[1] + " " + f[2]
		rw := byKey[key]
		if rw == nil {
			rw = &row{op: f[1], what: f[2]}
			byKey[key] = rw
			order = append(order, rw)
		}
		rw.ms = append(rw.ms, v)
	}
	return order, sc.Err()
}

func table(rows []*row) string {
	var b strings.Builder
	b.WriteString("| operation (real kernel, qemu TCG) | case | calls | p50 | max |\n|---|---|---:|---:|---:|\n")
	for _, r := range rows {
		s := append([]float64(nil), r.ms...)
		sort.Float64s(s)
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f ms | %.1f ms |\n", r.op, r.what, len(s), s[(len(s)-1)/2], s[len(s)-1])
	}
	return b.String()
}
