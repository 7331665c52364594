// Command routercost compares the in-process proxy path with the built-in
// router and with a one-plugin chain (bench.RouterCost), calling the
// handlers directly and over loopback HTTP, with a second built-in path in
// the same rotation as the noise floor, and writes the markdown table
// scripts/bench.sh puts into docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pillarhq/pillar/conformance/bench"
)

func main() { bench.Main("routercost", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("routercost", flag.ContinueOnError)
	plugin := fs.String("plugin", "bin/plugins/pinrouter.wasm", "router plugin module")
	config := fs.String("config", `{"upstream_id":"up_1","fallback":true}`, "the chain entry's config")
	n := fs.Int("n", 50000, "requests through each path")
	out := fs.String("out", "", "write the markdown table here (default: stdout only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	wasm, err := os.ReadFile(*plugin)
	if err != nil {
		return err
	}
	var md string
	for _, overHTTP := range []bool{false, true} {
		res, err := bench.RouterCost(ctx, wasm, *config, *n, overHTTP)
		if err != nil {
			return err
		}
		res.PluginDesc = fmt.Sprintf("`%s`, %s", filepath.Base(*plugin), res.PluginDesc)
		md += res.Markdown() + "\n"
	}
	return bench.Emit(md, *out)
}
