// Command benchtable turns `go test -bench -benchmem -count N` output on
// stdin into the markdown table of docs/benchmarks.md (bench.MicroTable):
// medians over the runs, and gateway ÷ bare for the proxy-path pairs.
package main

import (
	"fmt"
	"os"

	"github.com/pillarhq/pillar/conformance/bench"
)

func main() {
	ms, err := bench.ParseMicro(os.Stdin)
	if err == nil && len(ms) == 0 {
		err = fmt.Errorf("no benchmark results on stdin")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	fmt.Print(bench.MicroTable(ms))
}
