// Command benchtable turns `go test -bench -benchmem -count N` output on
// stdin into the markdown table of docs/benchmarks.md (bench.MicroTable):
// medians over the runs, and gateway ÷ bare for the proxy-path pairs.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/pillarhq/pillar/conformance/bench"
)

func main() { bench.Main("benchtable", run) }

func run(_ context.Context, _ []string) error {
	ms, err := bench.ParseMicro(os.Stdin)
	if err == nil && len(ms) == 0 {
		err = errors.New("no benchmark results on stdin")
	}
	if err != nil {
		return err
	}
	fmt.Print(bench.MicroTable(ms))
	return nil
}
