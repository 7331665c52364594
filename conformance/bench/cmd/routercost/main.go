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

func main() {
	plugin := flag.String("plugin", "bin/plugins/pinrouter.wasm", "router plugin module")
	config := flag.String("config", `{"upstream_id":"up_1","fallback":true}`, "the chain entry's config")
	n := flag.Int("n", 50000, "requests through each path")
	out := flag.String("out", "", "write the markdown table here (default: stdout only)")
	flag.Parse()
	if err := run(*plugin, *config, *n, *out); err != nil {
		fmt.Fprintln(os.Stderr, "routercost:", err)
		os.Exit(1)
	}
}

func run(plugin, config string, n int, out string) error {
	wasm, err := os.ReadFile(plugin)
	if err != nil {
		return err
	}
	var md string
	for _, overHTTP := range []bool{false, true} {
		res, err := bench.RouterCost(context.Background(), wasm, config, n, overHTTP)
		if err != nil {
			return err
		}
		res.PluginDesc = fmt.Sprintf("`%s`, %s", filepath.Base(plugin), res.PluginDesc)
		md += res.Markdown() + "\n"
	}
	fmt.Print(md)
	if out != "" {
		return os.WriteFile(out, []byte(md), 0o644)
	}
	return nil
}
